// RMSNorm forward and backward, one block per row; f32 arithmetic on bf16, f16 or f32 storage.
#include <type_traits>

#include "kernels/cuda/launchers.h"
#include "kernels/cuda/norm_common.cuh"

namespace seqpar::cuda_kernels {

namespace {

// out[t] = inp[t] * rstd[t] * weight, rstd[t] = 1 / sqrt(mean(inp[t]^2) + eps). The row is read
// twice; the second read hits L1/L2 (a row is C * 2 bytes, a few KB).
template <int N, typename TX, typename TW>
__global__ void rmsnorm_forward_kernel(TX* out,                        // [T, C], may alias inp
                                       float* __restrict__ rstd,       // [T]
                                       const TX* inp,                  // [T, C]
                                       const TW* __restrict__ weight,  // [C]
                                       int64_t C, float eps) {
  __shared__ float scratch[kWarp];
  const int64_t t = blockIdx.x, packs = C / N;
  const TX* x = inp + t * C;
  TX* y = out + t * C;
  float ss = 0.f;
  for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
    float v[N];
    load_pack<N>(v, x + p * N);
#pragma unroll
    for (int k = 0; k < N; ++k) ss += v[k] * v[k];
  }
  ss = block_sum(ss, scratch);
  const float r = 1.f / sqrtf(ss / static_cast<float>(C) + eps);
  if (threadIdx.x == 0) rstd[t] = r;
  for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
    float v[N], w[N];
    load_pack<N>(v, x + p * N);
    load_pack<N>(w, weight + p * N);
#pragma unroll
    for (int k = 0; k < N; ++k) v[k] = v[k] * r * w[k];
    store_pack<N>(y + p * N, v);
  }
}

// With y = w * x * r, r = (mean(x^2) + eps)^-1/2 and g = dL/dy:
//   dx_j = r * (w_j g_j - x_j * r^2 * mean_c(w_c g_c x_c)),   dw_c = sum_t g_c x_c r.
// Block b handles rows b, b + gridDim.x, ... and accumulates dw for those rows in shared memory,
// each thread owning fixed columns (stored column-pack-transposed, s_dw[k * packs + p], so a
// warp's accesses hit distinct banks). It writes its partial row to partials[b]; the second
// kernel sums the partials in a fixed order. No atomics: bitwise reproducible. Accumulate adds
// dx to dinp's values (the residual stream's gradient), rounding once.
template <int N, bool Accumulate, typename TX, typename TW>
__global__ void rmsnorm_backward_kernel(TX* dinp,                        // [T, C], may alias dout unless Accumulate
                                        float* __restrict__ partials,    // [gridDim.x, C]
                                        const TX* dout,                  // [T, C]
                                        const TX* __restrict__ inp,      // [T, C]
                                        const TW* __restrict__ weight,   // [C]
                                        const float* __restrict__ rstd,  // [T]
                                        int64_t T, int64_t C) {
  extern __shared__ float s_dw[];  // [C]
  __shared__ float scratch[kWarp];
  const int64_t packs = C / N;
  for (int64_t p = threadIdx.x; p < packs; p += blockDim.x)
#pragma unroll
    for (int k = 0; k < N; ++k) s_dw[k * packs + p] = 0.f;
  for (int64_t t = blockIdx.x; t < T; t += gridDim.x) {
    const float r = rstd[t];
    const TX* x = inp + t * C;
    const TX* g = dout + t * C;
    TX* dx = dinp + t * C;
    float dot = 0.f;
    for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
      float xv[N], gv[N], wv[N];
      load_pack<N>(xv, x + p * N);
      load_pack<N>(gv, g + p * N);
      load_pack<N>(wv, weight + p * N);
#pragma unroll
      for (int k = 0; k < N; ++k) dot += wv[k] * gv[k] * xv[k];
    }
    dot = block_sum(dot, scratch);
    const float c = dot * r * r / static_cast<float>(C);
    for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
      float xv[N], gv[N], wv[N], out[N];
      load_pack<N>(xv, x + p * N);
      load_pack<N>(gv, g + p * N);
      load_pack<N>(wv, weight + p * N);
#pragma unroll
      for (int k = 0; k < N; ++k) {
        out[k] = r * (wv[k] * gv[k] - xv[k] * c);
        s_dw[k * packs + p] += gv[k] * xv[k] * r;
      }
      if constexpr (Accumulate) {
        float prev[N];
        load_pack<N>(prev, dx + p * N);
#pragma unroll
        for (int k = 0; k < N; ++k) out[k] += prev[k];
      }
      store_pack<N>(dx + p * N, out);
    }
  }
  float* part = partials + static_cast<int64_t>(blockIdx.x) * C;
  for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
    float v[N];
#pragma unroll
    for (int k = 0; k < N; ++k) v[k] = s_dw[k * packs + p];
    store_pack<N>(part + p * N, v);
  }
}

// Short rows (at most 32 packs of 8: Qwen3's q/k norms over each head's D = 128 run on T * H rows of
// 16 packs): a group of L lanes per row, L = the packs rounded up to a power of two, so a warp holds
// 32 / L rows and a block of kRowThreads threads kRowThreads / L. A lane keeps its pack in registers
// (the row is read once) and the row's sum is a shuffle within the group, in a fixed order.
constexpr int kRowThreads = 512;

template <int L, typename TX, typename TW>
__global__ void __launch_bounds__(kRowThreads)
    rmsnorm_forward_rows_kernel(TX* out, float* __restrict__ rstd, const TX* inp, const TW* __restrict__ weight,
                                int64_t T, int64_t C, float eps) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * (kRowThreads / L) + threadIdx.x / L;
  const int p = static_cast<int>(threadIdx.x % L);
  const bool active = t < T && p < C / 8;
  float v[8] = {};
  if (active) load_pack<8>(v, inp + t * C + p * 8);
  float ss = 0.f;
#pragma unroll
  for (int k = 0; k < 8; ++k) ss += v[k] * v[k];
  ss = group_sum<L>(ss);
  const float r = 1.f / sqrtf(ss / static_cast<float>(C) + eps);
  if (t < T && p == 0) rstd[t] = r;
  if (!active) return;
  float w[8];
  load_pack<8>(w, weight + p * 8);
#pragma unroll
  for (int k = 0; k < 8; ++k) v[k] = v[k] * r * w[k];
  store_pack<8>(out + t * C + p * 8, v);
}

// The backward of short rows. Slot s (a group of L lanes) of block b takes rows b * S + s + i * gridDim.x * S
// (S = kRowThreads / L slots a block); each lane owns one pack of columns and sums its dweight in
// registers; at the end the block adds its slots' sums in slot order into partials[b]. Like the
// kernel above it: no atomics, bitwise reproducible.
template <int L, bool Accumulate, typename TX, typename TW>
__global__ void __launch_bounds__(kRowThreads)
    rmsnorm_backward_rows_kernel(TX* dinp, float* __restrict__ partials, const TX* dout, const TX* __restrict__ inp,
                                 const TW* __restrict__ weight, const float* __restrict__ rstd, int64_t T, int64_t C) {
  extern __shared__ float s_dw[];  // [S, C]
  constexpr int S = kRowThreads / L;
  const int slot = static_cast<int>(threadIdx.x / L), p = static_cast<int>(threadIdx.x % L);
  const bool owns = p < C / 8;
  float wv[8] = {}, dw[8] = {};
  if (owns) load_pack<8>(wv, weight + p * 8);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * S;
  // t0 is the same for the whole block, so every lane reaches the shuffles of every iteration.
  for (int64_t t0 = static_cast<int64_t>(blockIdx.x) * S; t0 < T; t0 += stride) {
    const int64_t t = t0 + slot;
    const bool act = t < T && owns;
    const float r = t < T ? rstd[t] : 0.f;
    float xv[8] = {}, gv[8] = {};
    if (act) {
      load_pack<8>(xv, inp + t * C + p * 8);
      load_pack<8>(gv, dout + t * C + p * 8);
    }
    float dot = 0.f;
#pragma unroll
    for (int k = 0; k < 8; ++k) dot += wv[k] * gv[k] * xv[k];
    dot = group_sum<L>(dot);
    if (!act) continue;
    const float c = dot * r * r / static_cast<float>(C);
    float o[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      o[k] = r * (wv[k] * gv[k] - xv[k] * c);
      dw[k] += gv[k] * xv[k] * r;
    }
    TX* dx = dinp + t * C + p * 8;
    if constexpr (Accumulate) {
      float prev[8];
      load_pack<8>(prev, dx);
#pragma unroll
      for (int k = 0; k < 8; ++k) o[k] += prev[k];
    }
    store_pack<8>(dx, o);
  }
  if (owns)
#pragma unroll
    for (int k = 0; k < 8; ++k) s_dw[slot * C + p * 8 + k] = dw[k];
  __syncthreads();
  for (int64_t c = threadIdx.x; c < C; c += kRowThreads) {
    float sum = 0.f;
    for (int s = 0; s < S; ++s) sum += s_dw[s * C + c];
    partials[static_cast<int64_t>(blockIdx.x) * C + c] = sum;
  }
}

// Calls f(std::integral_constant<int, L>) with L = packs rounded up to a power of two (packs <= 32).
template <typename F>
void with_row_lanes(int64_t packs, F&& f) {
  if (packs <= 1) return f(std::integral_constant<int, 1>{});
  if (packs <= 2) return f(std::integral_constant<int, 2>{});
  if (packs <= 4) return f(std::integral_constant<int, 4>{});
  if (packs <= 8) return f(std::integral_constant<int, 8>{});
  if (packs <= 16) return f(std::integral_constant<int, 16>{});
  f(std::integral_constant<int, 32>{});
}

constexpr int64_t kShortRowPacks = 32;  // rows of at most this many packs of 8 take the kernels above

}  // namespace

void rmsnorm_forward(void* out, float* rstd, const void* inp, DType x_dt, const void* weight, DType w_dt, int64_t T,
                     int64_t C, float eps, cudaStream_t stream) {
  if (T == 0) return;
  const bool vec = C % 8 == 0 && aligned16(out) && aligned16(inp) && aligned16(weight);
  dispatch_float(x_dt, [&](auto tx) {
    dispatch_float(w_dt, [&](auto tw) {
      using TX = decltype(tx);
      using TW = decltype(tw);
      if (vec && C / 8 <= kShortRowPacks) {
        with_row_lanes(C / 8, [&](auto lanes) {
          constexpr int L = decltype(lanes)::value;
          rmsnorm_forward_rows_kernel<L><<<ceil_div(T, kRowThreads / L), kRowThreads, 0, stream>>>(
              static_cast<TX*>(out), rstd, static_cast<const TX*>(inp), static_cast<const TW*>(weight), T, C, eps);
        });
      } else if (vec) {
        rmsnorm_forward_kernel<8><<<static_cast<unsigned>(T), norm_row_threads(C / 8), 0, stream>>>(
            static_cast<TX*>(out), rstd, static_cast<const TX*>(inp), static_cast<const TW*>(weight), C, eps);
      } else {
        rmsnorm_forward_kernel<1><<<static_cast<unsigned>(T), norm_row_threads(C), 0, stream>>>(
            static_cast<TX*>(out), rstd, static_cast<const TX*>(inp), static_cast<const TW*>(weight), C, eps);
      }
      SEQPAR_LAUNCH_CHECK();
    });
  });
}

int norm_backward_blocks(int64_t T) {
  const int64_t b = int64_t{4} * num_sms();
  return static_cast<int>(T < b ? (T > 0 ? T : 1) : b);
}

void rmsnorm_backward(void* dinp, void* dweight, DType dw_dt, float* partials, const void* dout, const void* inp,
                      DType x_dt, const void* weight, DType w_dt, const float* rstd, int64_t T, int64_t C,
                      bool accumulate, cudaStream_t stream) {
  if (C == 0) return;
  const int blocks = norm_backward_blocks(T);
  const bool vec =
      C % 8 == 0 && aligned16(dinp) && aligned16(dout) && aligned16(inp) && aligned16(weight) && aligned16(partials);
  const size_t smem = static_cast<size_t>(C) * sizeof(float);
  dispatch_float(x_dt, [&](auto tx) {
    dispatch_float(w_dt, [&](auto tw) {
      using TX = decltype(tx);
      using TW = decltype(tw);
      auto launch = [&](auto kernel, int n) {
        if (smem > 48 * 1024)
          SEQPAR_CUDA_CHECK(
              cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
        kernel<<<blocks, norm_row_threads(C / n), smem, stream>>>(
            static_cast<TX*>(dinp), partials, static_cast<const TX*>(dout), static_cast<const TX*>(inp),
            static_cast<const TW*>(weight), rstd, T, C);
        SEQPAR_LAUNCH_CHECK();
      };
      if (vec && C / 8 <= kShortRowPacks) {
        with_row_lanes(C / 8, [&](auto lanes) {
          constexpr int L = decltype(lanes)::value;
          const size_t rows_smem = static_cast<size_t>(kRowThreads / L) * C * sizeof(float);  // <= 16 KB
          auto kernel = accumulate ? rmsnorm_backward_rows_kernel<L, true, TX, TW>
                                   : rmsnorm_backward_rows_kernel<L, false, TX, TW>;
          kernel<<<blocks, kRowThreads, rows_smem, stream>>>(static_cast<TX*>(dinp), partials,
                                                              static_cast<const TX*>(dout), static_cast<const TX*>(inp),
                                                              static_cast<const TW*>(weight), rstd, T, C);
          SEQPAR_LAUNCH_CHECK();
        });
      } else if (vec) {
        accumulate ? launch(rmsnorm_backward_kernel<8, true, TX, TW>, 8)
                   : launch(rmsnorm_backward_kernel<8, false, TX, TW>, 8);
      } else {
        accumulate ? launch(rmsnorm_backward_kernel<1, true, TX, TW>, 1)
                   : launch(rmsnorm_backward_kernel<1, false, TX, TW>, 1);
      }
    });
  });
  add_norm_partials(dweight, dw_dt, partials, blocks, C, stream);
}

}  // namespace seqpar::cuda_kernels
