// Cross-entropy on pre-shifted targets, one block per row, online log-sum-exp.
#include <cfloat>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launchers.h"

namespace seqpar::cuda_kernels {

namespace {

constexpr int kThreads = 256;
constexpr float kLog2e = 1.4426950408889634f;
constexpr int32_t kIgnore = -100;  // kernels/ops.h kIgnoreIndex

// (m, s) represents sum_i exp(x_i) = s * exp(m). m starts at -FLT_MAX rather than -inf so that
// merging two empty states never forms inf - inf.
struct LogSumExp {
  float m = -FLT_MAX;
  float s = 0.f;
  __device__ __forceinline__ void merge(float m2, float s2) {
    const float mn = fmaxf(m, m2);
    s = s * exp2f((m - mn) * kLog2e) + s2 * exp2f((m2 - mn) * kLog2e);
    m = mn;
  }
};

// log(sum_v exp(row[v])) over the block; every thread gets the result. Each thread streams its
// packs once, rescaling its running sum when the pack raises its maximum.
template <int N, typename T>
__device__ __forceinline__ float row_logsumexp(const T* row, int64_t V) {
  __shared__ float s_m[kThreads / kWarp], s_s[kThreads / kWarp];
  LogSumExp acc;
  const int64_t packs = V / N;
  for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
    float v[N];
    load_pack<N>(v, row + p * N);
    float pm = v[0];
#pragma unroll
    for (int k = 1; k < N; ++k) pm = fmaxf(pm, v[k]);
    const float mn = fmaxf(acc.m, pm);
    float s = acc.s * exp2f((acc.m - mn) * kLog2e);
#pragma unroll
    for (int k = 0; k < N; ++k) s += exp2f((v[k] - mn) * kLog2e);
    acc.m = mn;
    acc.s = s;
  }
#pragma unroll
  for (int o = kWarp / 2; o > 0; o /= 2) {
    const float m2 = __shfl_xor_sync(0xffffffffu, acc.m, o);
    const float s2 = __shfl_xor_sync(0xffffffffu, acc.s, o);
    acc.merge(m2, s2);
  }
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  if (lane == 0) {
    s_m[warp] = acc.m;
    s_s[warp] = acc.s;
  }
  __syncthreads();
  LogSumExp total;
  for (int w = 0; w < static_cast<int>(blockDim.x) / kWarp; ++w) total.merge(s_m[w], s_s[w]);
  return total.m + logf(total.s);
}

// losses[t] = logsumexp(logits[t]) - logits[t, targets[t]]; 0 for ignored rows (read nothing).
// A target outside [0, V) that is not -100 is reported and its loss set to NaN.
template <int N, typename T>
__global__ void __launch_bounds__(kThreads) cross_entropy_forward_kernel(float* __restrict__ losses,  // [T]
                                                                         float* __restrict__ lse_out,  // [T] or null
                                                                         const T* __restrict__ logits,  // [T, V]
                                                                         const int32_t* __restrict__ targets,  // [T]
                                                                         int64_t V, int* err) {
  const int64_t t = blockIdx.x;
  const int32_t target = targets[t];
  if (target == kIgnore) {
    if (threadIdx.x == 0) {
      losses[t] = 0.f;
      if (lse_out) lse_out[t] = 0.f;
    }
    return;
  }
  if (target < 0 || target >= V) {
    if (threadIdx.x == 0) {
      report_error(err, t, target);
      losses[t] = __int_as_float(0x7fffffff);
      if (lse_out) lse_out[t] = 0.f;
    }
    return;
  }
  const T* row = logits + t * V;
  const float lse = row_logsumexp<N>(row, V);
  if (threadIdx.x == 0) {
    losses[t] = lse - to_f32(row[target]);
    if (lse_out) lse_out[t] = lse;
  }
}

// dlogits[t, v] = (softmax(logits[t])[v] - [v == target]) * dloss; zeros for ignored rows.
// logsumexp is the forward's (saved_lse [T]: one read of the row) or, with saved_lse null,
// recomputed (a second read); dlogits may alias logits, since each element is read and then written
// by the same thread (after the row's reduction when there is one). The same function of the row
// either way: the same bits.
template <int N, typename T>
__global__ void __launch_bounds__(kThreads) cross_entropy_backward_kernel(T* dlogits,  // [T, V]
                                                                          const T* logits,  // [T, V]
                                                                          const int32_t* __restrict__ targets,  // [T]
                                                                          const float* __restrict__ saved_lse,
                                                                          float dloss, int64_t V, int* err) {
  const int64_t t = blockIdx.x;
  const int32_t target = targets[t];
  const int64_t packs = V / N;
  T* drow = dlogits + t * V;
  if (target == kIgnore) {
    float z[N] = {};
    for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) store_pack<N>(drow + p * N, z);
    return;
  }
  if (target < 0 || target >= V) {
    if (threadIdx.x == 0) report_error(err, t, target);
    return;
  }
  const T* row = logits + t * V;
  const float lse = saved_lse ? saved_lse[t] : row_logsumexp<N>(row, V);
  for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
    float v[N];
    load_pack<N>(v, row + p * N);
#pragma unroll
    for (int k = 0; k < N; ++k) {
      const float prob = exp2f((v[k] - lse) * kLog2e);
      v[k] = (prob - (p * N + k == target ? 1.f : 0.f)) * dloss;
    }
    store_pack<N>(drow + p * N, v);
  }
}

}  // namespace

void cross_entropy_forward(float* losses, float* lse, const void* logits, DType dt, const int32_t* targets, int64_t T,
                           int64_t V, int* err, cudaStream_t stream) {
  if (T == 0) return;
  const bool vec = V % 8 == 0 && aligned16(logits);
  dispatch_float(dt, [&](auto tag) {
    using TE = decltype(tag);
    if (vec) {
      cross_entropy_forward_kernel<8><<<static_cast<unsigned>(T), kThreads, 0, stream>>>(
          losses, lse, static_cast<const TE*>(logits), targets, V, err);
    } else {
      cross_entropy_forward_kernel<1><<<static_cast<unsigned>(T), kThreads, 0, stream>>>(
          losses, lse, static_cast<const TE*>(logits), targets, V, err);
    }
    SEQPAR_LAUNCH_CHECK();
  });
}

void cross_entropy_backward(void* dlogits, const void* logits, DType dt, const int32_t* targets, const float* lse,
                            float dloss, int64_t T, int64_t V, int* err, cudaStream_t stream) {
  if (T == 0) return;
  const bool vec = V % 8 == 0 && aligned16(logits) && aligned16(dlogits);
  dispatch_float(dt, [&](auto tag) {
    using TE = decltype(tag);
    if (vec) {
      cross_entropy_backward_kernel<8><<<static_cast<unsigned>(T), kThreads, 0, stream>>>(
          static_cast<TE*>(dlogits), static_cast<const TE*>(logits), targets, lse, dloss, V, err);
    } else {
      cross_entropy_backward_kernel<1><<<static_cast<unsigned>(T), kThreads, 0, stream>>>(
          static_cast<TE*>(dlogits), static_cast<const TE*>(logits), targets, lse, dloss, V, err);
    }
    SEQPAR_LAUNCH_CHECK();
  });
}

}  // namespace seqpar::cuda_kernels
