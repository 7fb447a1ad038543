// Qwen3's per-head RMSNorm followed by RoPE, forward and backward, each in one pass over the heads (the pair of
// kernels they replace, rmsnorm.cu's short rows and rope.cu, read and write every head twice).
#include <type_traits>

#include "kernels/cuda/launchers.h"
#include "kernels/cuda/norm_common.cuh"

namespace seqpar::cuda_kernels {

namespace {

constexpr int kThreads = 256;

// A group of L = D / 8 lanes per token (L a power of two, D / 2 a multiple of 8): lane p holds elements [8p, 8p + 8)
// of each head, and lane p ^ (L / 2) the other element of each of its RoPE pairs. cos and sin of the token's angles
// (8 a lane: frequencies (p mod L/2) * 8 + k) are evaluated once and serve all H heads. sin carries the pair's sign:
// a first-half element takes -sin times its partner, a second-half one +sin (rope.cu's formula).
template <int L>
struct TokenRotation {
  float cs[8], sn[8];
  __device__ __forceinline__ TokenRotation(int p, float position, const float* __restrict__ inv_freq, float scale) {
    constexpr int kHalf = L / 2;
    float f[8];
    load_pack<8>(f, inv_freq + (p % kHalf) * 8);
    const float signed_scale = p < kHalf ? -scale : scale;
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      sincosf(position * f[k], &sn[k], &cs[k]);
      cs[k] *= scale;
      sn[k] *= signed_scale;
    }
  }
};

// out = rope(x * rstd * weight) per head row; rstd[t * H + h]. Rows of a token past T (the last block's tail) take
// part in the group's shuffles with zeros and write nothing.
template <int L, typename TX, typename TW>
__global__ void __launch_bounds__(kThreads)
    head_norm_rope_forward_kernel(TX* __restrict__ out, float* __restrict__ rstd, const TX* __restrict__ x,
                                  const TW* __restrict__ weight, const int32_t* __restrict__ position_ids,
                                  const float* __restrict__ inv_freq, int64_t T, int64_t H, float eps, float scale) {
  constexpr int D = 8 * L;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * (kThreads / L) + threadIdx.x / L;
  const int p = static_cast<int>(threadIdx.x % L);
  const bool live = t < T;
  const TokenRotation<L> rot(p, live ? static_cast<float>(position_ids[t]) : 0.f, inv_freq, scale);
  float w[8];
  load_pack<8>(w, weight + p * 8);
  const int64_t base = (live ? t : 0) * H * D + p * 8;
#pragma unroll 2
  for (int64_t h = 0; h < H; ++h) {
    float v[8] = {};
    if (live) load_pack<8>(v, x + base + h * D);
    float ss = 0.f;
#pragma unroll
    for (int k = 0; k < 8; ++k) ss += v[k] * v[k];
    ss = group_sum<L>(ss);
    const float r = 1.f / sqrtf(ss / static_cast<float>(D) + eps);
    float n[8], y[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) n[k] = v[k] * r * w[k];
#pragma unroll
    for (int k = 0; k < 8; ++k) y[k] = n[k] * rot.cs[k] + __shfl_xor_sync(0xffffffffu, n[k], L / 2) * rot.sn[k];
    if (!live) continue;
    store_pack<8>(out + base + h * D, y);
    if (p == 0) rstd[t * H + h] = r;
  }
}

// The backward: g = the inverse rotation of dout (rope.cu's backward, kept in f32), then RMSNorm's backward on g
// (rmsnorm.cu's formulas). Slot s (a group of L lanes) of block b takes tokens b * S + s + i * gridDim.x * S, S =
// kThreads / L; each lane sums its columns' dweight in registers, and the block adds its slots' sums in slot order
// into partials[b] (norm_params_kernel then sums the blocks in a fixed order: no atomics). dx may be dout: a row's
// lanes read all of it before any writes (the shuffles order them).
template <int L, typename TX, typename TW>
__global__ void __launch_bounds__(kThreads)
    head_norm_rope_backward_kernel(TX* dx, float* __restrict__ partials, const TX* dout, const TX* __restrict__ x,
                                   const TW* __restrict__ weight, const float* __restrict__ rstd,
                                   const int32_t* __restrict__ position_ids, const float* __restrict__ inv_freq,
                                   int64_t T, int64_t H, float scale) {
  constexpr int D = 8 * L, S = kThreads / L;
  __shared__ float s_dw[S][D];
  const int slot = static_cast<int>(threadIdx.x / L), p = static_cast<int>(threadIdx.x % L);
  float w[8], dw[8] = {};
  load_pack<8>(w, weight + p * 8);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * S;
  // t0 is the same for the whole block, so every lane reaches the shuffles of every iteration.
  for (int64_t t0 = static_cast<int64_t>(blockIdx.x) * S; t0 < T; t0 += stride) {
    const int64_t t = t0 + slot;
    const bool live = t < T;
    const TokenRotation<L> rot(p, live ? static_cast<float>(position_ids[t]) : 0.f, inv_freq, scale);
    const int64_t base = (live ? t : 0) * H * D + p * 8;
#pragma unroll 2
    for (int64_t h = 0; h < H; ++h) {
      float gy[8] = {}, xv[8] = {};
      if (live) {
        load_pack<8>(gy, dout + base + h * D);
        load_pack<8>(xv, x + base + h * D);
      }
      float g[8];
#pragma unroll
      for (int k = 0; k < 8; ++k) g[k] = gy[k] * rot.cs[k] - __shfl_xor_sync(0xffffffffu, gy[k], L / 2) * rot.sn[k];
      float dot = 0.f;
#pragma unroll
      for (int k = 0; k < 8; ++k) dot += w[k] * g[k] * xv[k];
      dot = group_sum<L>(dot);
      if (!live) continue;
      const float r = rstd[t * H + h];
      const float c = dot * r * r / static_cast<float>(D);
      float o[8];
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        o[k] = r * (w[k] * g[k] - xv[k] * c);
        dw[k] += g[k] * xv[k] * r;
      }
      store_pack<8>(dx + base + h * D, o);
    }
  }
#pragma unroll
  for (int k = 0; k < 8; ++k) s_dw[slot][p * 8 + k] = dw[k];
  __syncthreads();
  for (int c = static_cast<int>(threadIdx.x); c < D; c += kThreads) {
    float sum = 0.f;
    for (int s = 0; s < S; ++s) sum += s_dw[s][c];
    partials[static_cast<int64_t>(blockIdx.x) * D + c] = sum;
  }
}

// Calls f(TX{}, TW{}, std::integral_constant<int, L>{}): the element types of x_dt and w_dt, L = D / 8 lanes a head
// (D in {16, 32, 64, 128, 256}).
template <typename F>
void with_kernel_types(DType x_dt, DType w_dt, int64_t D, F&& f) {
  dispatch_float(x_dt, [&](auto tx) {
    dispatch_float(w_dt, [&](auto tw) {
      switch (D) {
        case 16:
          return f(tx, tw, std::integral_constant<int, 2>{});
        case 32:
          return f(tx, tw, std::integral_constant<int, 4>{});
        case 64:
          return f(tx, tw, std::integral_constant<int, 8>{});
        case 128:
          return f(tx, tw, std::integral_constant<int, 16>{});
        default:
          return f(tx, tw, std::integral_constant<int, 32>{});
      }
    });
  });
}

}  // namespace

bool head_norm_rope_fused(int64_t D, std::initializer_list<const void*> pointers) {
  if (D != 16 && D != 32 && D != 64 && D != 128 && D != 256) return false;
  for (const void* p : pointers)
    if (!aligned16(p)) return false;
  return true;
}

int head_norm_rope_backward_blocks(int64_t T, int64_t D) {
  const int64_t slots = kThreads / (D / 8), need = (T + slots - 1) / slots, most = int64_t{8} * num_sms();
  return static_cast<int>(need < 1 ? 1 : (need < most ? need : most));
}

void head_norm_rope_forward(void* out, float* rstd, const void* x, DType x_dt, const void* weight, DType w_dt,
                            const int32_t* position_ids, const float* inv_freq, int64_t T, int64_t H, int64_t D,
                            float eps, float scale, cudaStream_t stream) {
  if (T == 0 || H == 0) return;
  with_kernel_types(x_dt, w_dt, D, [&](auto tx, auto tw, auto lanes) {
    using TX = decltype(tx);
    using TW = decltype(tw);
    constexpr int L = decltype(lanes)::value;
    head_norm_rope_forward_kernel<L><<<ceil_div(T, kThreads / L), kThreads, 0, stream>>>(
        static_cast<TX*>(out), rstd, static_cast<const TX*>(x), static_cast<const TW*>(weight), position_ids, inv_freq,
        T, H, eps, scale);
    SEQPAR_LAUNCH_CHECK();
  });
}

void head_norm_rope_backward(void* dx, void* dweight, DType dw_dt, float* partials, const void* dout, const void* x,
                             DType x_dt, const void* weight, DType w_dt, const float* rstd,
                             const int32_t* position_ids, const float* inv_freq, int64_t T, int64_t H, int64_t D,
                             float scale, cudaStream_t stream) {
  const int blocks = head_norm_rope_backward_blocks(T, D);
  with_kernel_types(x_dt, w_dt, D, [&](auto tx, auto tw, auto lanes) {
    using TX = decltype(tx);
    using TW = decltype(tw);
    constexpr int L = decltype(lanes)::value;
    head_norm_rope_backward_kernel<L><<<blocks, kThreads, 0, stream>>>(
        static_cast<TX*>(dx), partials, static_cast<const TX*>(dout), static_cast<const TX*>(x),
        static_cast<const TW*>(weight), rstd, position_ids, inv_freq, T, H, scale);
    SEQPAR_LAUNCH_CHECK();
  });
  add_norm_partials(dweight, dw_dt, partials, blocks, D, stream);
}

}  // namespace seqpar::cuda_kernels
