// Rotary position embedding (HF rotate_half convention), in place, forward and inverse.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launchers.h"

namespace seqpar::cuda_kernels {

namespace {

constexpr int kThreads = 256;
constexpr int kHeadsPerThread = 4;  // one sin/cos evaluation serves this many heads

// One thread per (token, group of heads, pack of N pairs). For pair (i, i + D/2):
//   y_i = x_i cos - x_{i+D/2} sin,  y_{i+D/2} = x_{i+D/2} cos + x_i sin,  angle = pos * inv_freq[i];
// sign = -1 applies the inverse rotation (the backward); cos and sin are multiplied by scale (HF's
// attention_scaling, yarn / longrope; a product with 1.0f is exact, so scale = 1 is the unscaled
// rotation). The angle is formed in f32 exactly as HF does (pos * inv_freq), and sincosf is the
// accurate version (large angles take its slow path).
template <int N, typename T>
__global__ void rope_kernel(T* __restrict__ x,                         // [T, H, D]
                            const int32_t* __restrict__ position_ids,  // [T]
                            const float* __restrict__ inv_freq,        // [D/2]
                            int64_t tokens, int64_t H, int64_t D, float sign, float scale) {
  const int64_t half = D / 2, packs = half / N;
  const int64_t groups = (H + kHeadsPerThread - 1) / kHeadsPerThread;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= tokens * groups * packs) return;
  const int64_t p = i % packs, hg = (i / packs) % groups, t = i / (packs * groups);
  float f[N], cs[N], sn[N];
  load_pack<N>(f, inv_freq + p * N);
  const float pos = static_cast<float>(position_ids[t]);
#pragma unroll
  for (int k = 0; k < N; ++k) {
    sincosf(pos * f[k], &sn[k], &cs[k]);
    sn[k] *= sign;
    cs[k] *= scale;
    sn[k] *= scale;
  }
  const int64_t h_end = (hg + 1) * kHeadsPerThread < H ? (hg + 1) * kHeadsPerThread : H;
  for (int64_t h = hg * kHeadsPerThread; h < h_end; ++h) {
    T* row = x + (t * H + h) * D;
    float a[N], b[N], ya[N], yb[N];
    load_pack<N>(a, row + p * N);
    load_pack<N>(b, row + half + p * N);
#pragma unroll
    for (int k = 0; k < N; ++k) {
      ya[k] = a[k] * cs[k] - b[k] * sn[k];
      yb[k] = b[k] * cs[k] + a[k] * sn[k];
    }
    store_pack<N>(row + p * N, ya);
    store_pack<N>(row + half + p * N, yb);
  }
}

}  // namespace

void rope(void* x, DType dt, const int32_t* position_ids, const float* inv_freq, int64_t T, int64_t H, int64_t D,
          bool inverse, float scale, cudaStream_t stream) {
  if (T == 0 || H == 0) return;
  const int64_t half = D / 2;
  // Every pack start (row + p * 8 and row + half + p * 8) is 16-byte aligned when the base is
  // and half % 8 == 0 (bf16: 16 bytes; f32: 32 bytes).
  const bool vec = half % 8 == 0 && aligned16(x) && aligned16(inv_freq);
  const int64_t groups = (H + kHeadsPerThread - 1) / kHeadsPerThread;
  const float sign = inverse ? -1.f : 1.f;
  dispatch_float(dt, [&](auto tag) {
    using TE = decltype(tag);
    if (vec) {
      rope_kernel<8><<<ceil_div(T * groups * (half / 8), kThreads), kThreads, 0, stream>>>(
          static_cast<TE*>(x), position_ids, inv_freq, T, H, D, sign, scale);
    } else {
      rope_kernel<1><<<ceil_div(T * groups * half, kThreads), kThreads, 0, stream>>>(static_cast<TE*>(x), position_ids,
                                                                                     inv_freq, T, H, D, sign, scale);
    }
    SEQPAR_LAUNCH_CHECK();
  });
}

}  // namespace seqpar::cuda_kernels
