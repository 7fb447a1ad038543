// What the row-norm kernels (rmsnorm.cu, layernorm.cu) share: one block per row of up to 256
// threads, and the fixed-order column sums that turn the backward's per-block partials into the
// parameter gradients without atomics (bitwise reproducible).
#pragma once

#include "kernels/cuda/common.cuh"

namespace seqpar::cuda_kernels {

// Threads of a block that walks one row of `packs` packs: whole warps, at most 256.
inline int norm_row_threads(int64_t packs) {
  constexpr int64_t kMaxThreads = 256;
  const int64_t t = (packs + kWarp - 1) / kWarp * kWarp;
  return static_cast<int>(t < kMaxThreads ? t : kMaxThreads);
}

// Column c of partials [blocks, W] summed over b in a fixed order (8 rows of threads take every 8th
// b, then row 0 adds the 8 sums in order) and added to out0[c] for c < W0, else to out1[c - W0]
// (RMSNorm: dweight alone, W0 = W = C; LayerNorm: dweight then dbias, W0 = C, W = 2C). 32 columns
// per block, coalesced reads. Launch: ceil_div(W, kWarp) blocks of dim3(kWarp, 8).
template <typename TO>
__global__ void norm_params_kernel(TO* __restrict__ out0, TO* __restrict__ out1, const float* __restrict__ partials,
                                   int blocks, int64_t W0, int64_t W) {
  __shared__ float s[8][kWarp];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kWarp + threadIdx.x;
  float acc = 0.f;
  if (c < W)
    for (int b = threadIdx.y; b < blocks; b += 8) acc += partials[static_cast<int64_t>(b) * W + c];
  s[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < W) {
    float sum = 0.f;
#pragma unroll
    for (int y = 0; y < 8; ++y) sum += s[y][threadIdx.x];
    TO* o = c < W0 ? out0 + c : out1 + (c - W0);
    *o = from_f32<TO>(to_f32(*o) + sum);
  }
}

// dweight [C] (dw_dt) += the column sums of partials [blocks, C] (norm_params_kernel): the last step of RMSNorm's
// backward and of the head norm's (head_norm_rope.cu).
inline void add_norm_partials(void* dweight, DType dw_dt, const float* partials, int blocks, int64_t C,
                              cudaStream_t stream) {
  dispatch_float(dw_dt, [&](auto tdw) {
    using TDW = decltype(tdw);
    norm_params_kernel<TDW><<<ceil_div(C, kWarp), dim3(kWarp, 8), 0, stream>>>(static_cast<TDW*>(dweight), nullptr,
                                                                             partials, blocks, C, C);
    SEQPAR_LAUNCH_CHECK();
  });
}

}  // namespace seqpar::cuda_kernels
