// AdamW step on f32 master weights and moments, f32, bf16 or f16 gradients; optionally the updated
// weights rounded into a second, compute-dtype copy in the same pass.
#include <type_traits>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launchers.h"

namespace seqpar::cuda_kernels {

namespace {

constexpr int kThreads = 256;

// torch.optim.AdamW's single-tensor order of operations (kernels/cpu/adamw.h):
//   g = grad * grad_scale;  p = p * decay;  m = lerp(m, g, 1 - beta1);
//   v = v * beta2 + (1 - beta2) * g * g;  p = p + (-step_size * m) / (sqrt(v) / sqrt(bc2) + eps)
// torch's lerp: w < 0.5 ? a + w (b - a) : b - (b - a)(1 - w). nvcc fuses some multiply-adds, so
// the result agrees with the CPU to an ulp or so, not bit for bit.
// With TR not void, the updated weights are also rounded into r (the same bits as a cast after the
// step: the value rounded is the f32 stored).
template <int M, typename TG, typename TR>
__device__ __forceinline__ void adamw_elems(float* p, float* m, float* v, const TG* grad, TR* r, int64_t off,
                                            const AdamWArgs& a) {
  float pv[M], mv[M], vv[M], g[M];
  load_pack<M>(pv, p);
  load_pack<M>(mv, m);
  load_pack<M>(vv, v);
  load_pack<M>(g, grad);
  const float w = a.one_minus_beta1;
#pragma unroll
  for (int k = 0; k < M; ++k) {
    const float gk = g[k] * a.grad_scale;
    pv[k] *= a.decay;
    mv[k] = fabsf(w) < 0.5f ? mv[k] + w * (gk - mv[k]) : gk - (gk - mv[k]) * (1.f - w);
    vv[k] = vv[k] * a.beta2 + a.one_minus_beta2 * gk * gk;
    const float denom = sqrtf(vv[k]) / a.bias_correction2_sqrt + a.eps;
    pv[k] += a.neg_step_size * mv[k] / denom;
  }
  store_pack<M>(p, pv);
  store_pack<M>(m, mv);
  store_pack<M>(v, vv);
  if constexpr (!std::is_void_v<TR>) store_pack<M>(r + off, pv);
}

// Threads [0, n/N) take one N-pack each; the next n % N threads take the scalar tail.
template <int N, typename TG, typename TR>
__global__ void adamw_kernel(float* __restrict__ p, float* __restrict__ m, float* __restrict__ v,
                             const TG* __restrict__ grad, TR* __restrict__ r, int64_t n, AdamWArgs a) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x, packs = n / N;
  if (i < packs) {
    adamw_elems<N>(p + i * N, m + i * N, v + i * N, grad + i * N, r, i * N, a);
  } else if (const int64_t j = packs * N + (i - packs); j < n) {
    adamw_elems<1>(p + j, m + j, v + j, grad + j, r, j, a);
  }
}

template <typename TG, typename TR>
void launch_adamw(float* param, float* m, float* v, const TG* grad, TR* rounded, int64_t n, const AdamWArgs& a,
                  bool vec, cudaStream_t stream) {
  const int64_t threads = vec ? n / 4 + n % 4 : n;
  if (vec) {
    adamw_kernel<4><<<ceil_div(threads, kThreads), kThreads, 0, stream>>>(param, m, v, grad, rounded, n, a);
  } else {
    adamw_kernel<1><<<ceil_div(threads, kThreads), kThreads, 0, stream>>>(param, m, v, grad, rounded, n, a);
  }
  SEQPAR_LAUNCH_CHECK();
}

}  // namespace

void adamw(float* param, float* m, float* v, const void* grad, DType g_dt, int64_t n, const AdamWArgs& a,
           cudaStream_t stream, void* rounded, DType r_dt) {
  if (n == 0) return;
  // 4 f32 = 16 bytes; a bf16 gradient (or rounded) pack is then 8 bytes, which needs 8-byte alignment only.
  const bool vec = aligned16(param) && aligned16(m) && aligned16(v) && aligned16(grad) &&
                   (rounded == nullptr || aligned16(rounded));
  dispatch_float(g_dt, [&](auto gtag) {
    using TG = decltype(gtag);
    const TG* g = static_cast<const TG*>(grad);
    if (rounded == nullptr) return launch_adamw<TG, void>(param, m, v, g, nullptr, n, a, vec, stream);
    dispatch_float(r_dt, [&](auto rtag) {
      using TR = decltype(rtag);
      launch_adamw<TG, TR>(param, m, v, g, static_cast<TR*>(rounded), n, a, vec, stream);
    });
  });
}

}  // namespace seqpar::cuda_kernels
