// Device helpers shared by the kernels in this folder: bf16 / f16 <-> f32, packed 16-byte loads and
// stores, warp/block reductions, the device error slot. nvcc only (no fmt, no Tensor).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/cuda_check.h"
#include "core/dtype.h"

namespace seqpar::cuda_kernels {

inline constexpr int kWarp = 32;

// ---- element conversion -------------------------------------------------------------------

__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(bf16 x) { return __uint_as_float(static_cast<uint32_t>(x.bits) << 16); }
__device__ __forceinline__ float to_f32(f16 x) { return __half2float(__ushort_as_half(x.bits)); }

template <typename T>
__device__ __forceinline__ T from_f32(float x);
template <>
__device__ __forceinline__ float from_f32<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ bf16 from_f32<bf16>(float x) {  // round to nearest even, one cvt instruction
  return bf16{__bfloat16_as_ushort(__float2bfloat16_rn(x))};
}
template <>
__device__ __forceinline__ f16 from_f32<f16>(float x) {  // round to nearest even (core/dtype.h's f32_to_f16)
  return f16{__half_as_ushort(__float2half_rn(x))};
}

// ---- packed access ------------------------------------------------------------------------
// N consecutive elements moved with the widest access (16, 8 or 4 bytes) that N * sizeof(T)
// allows, so a warp reads whole cache lines in one instruction per 16 bytes. For N * sizeof(T)
// >= 16 the pointer must be 16-byte aligned (launchers check, and fall back to N = 1).

template <typename W, int N, typename T>
__device__ __forceinline__ void load_words(float (&out)[N], const T* p) {
  constexpr int kWords = N * static_cast<int>(sizeof(T)) / static_cast<int>(sizeof(W));
  constexpr int kPer = static_cast<int>(sizeof(W) / sizeof(T));
#pragma unroll
  for (int w = 0; w < kWords; ++w) {
    W raw = reinterpret_cast<const W*>(p)[w];
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int j = 0; j < kPer; ++j) out[w * kPer + j] = to_f32(e[j]);
  }
}

template <typename W, int N, typename T>
__device__ __forceinline__ void store_words(T* p, const float (&in)[N]) {
  constexpr int kWords = N * static_cast<int>(sizeof(T)) / static_cast<int>(sizeof(W));
  constexpr int kPer = static_cast<int>(sizeof(W) / sizeof(T));
#pragma unroll
  for (int w = 0; w < kWords; ++w) {
    W raw;
    T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
    for (int j = 0; j < kPer; ++j) e[j] = from_f32<T>(in[w * kPer + j]);
    reinterpret_cast<W*>(p)[w] = raw;
  }
}

template <int N, typename T>
__device__ __forceinline__ void load_pack(float (&out)[N], const T* p) {
  constexpr int kBytes = N * static_cast<int>(sizeof(T));
  if constexpr (kBytes % 16 == 0) {
    load_words<int4>(out, p);
  } else if constexpr (kBytes % 8 == 0) {
    load_words<int2>(out, p);
  } else if constexpr (kBytes % 4 == 0) {
    load_words<int>(out, p);
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) out[i] = to_f32(p[i]);
  }
}

template <int N, typename T>
__device__ __forceinline__ void store_pack(T* p, const float (&in)[N]) {
  constexpr int kBytes = N * static_cast<int>(sizeof(T));
  if constexpr (kBytes % 16 == 0) {
    store_words<int4>(p, in);
  } else if constexpr (kBytes % 8 == 0) {
    store_words<int2>(p, in);
  } else if constexpr (kBytes % 4 == 0) {
    store_words<int>(p, in);
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) p[i] = from_f32<T>(in[i]);
  }
}

// ---- reductions (fixed order: the result is bitwise reproducible) ------------------------

template <typename F>
__device__ __forceinline__ F warp_sum(F x) {
#pragma unroll
  for (int o = kWarp / 2; o > 0; o /= 2) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// Sum over each aligned group of L lanes (L a power of two, at most 32), returned to every lane of the
// group; every lane of the warp must take part.
template <int L, typename F>
__device__ __forceinline__ F group_sum(F x) {
  static_assert(L >= 1 && L <= kWarp && (L & (L - 1)) == 0, "group_sum: L must be a power of two up to 32");
#pragma unroll
  for (int o = L / 2; o > 0; o /= 2) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
  for (int o = kWarp / 2; o > 0; o /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

// Sum over the block, returned to every thread. blockDim.x a multiple of 32, at most 1024.
// Uses `scratch` (32 elements of shared memory); safe to call repeatedly.
template <typename F>
__device__ __forceinline__ F block_sum(F x, F* scratch) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, warps = blockDim.x / kWarp;
  x = warp_sum(x);
  __syncthreads();  // a previous call may still be reading scratch
  if (lane == 0) scratch[warp] = x;
  __syncthreads();
  x = lane < warps ? scratch[lane] : F(0);
  return warp_sum(x);
}

// ---- device error slot ---------------------------------------------------------------------
// err[0] = 1 once a kernel found bad input, err[1] = where (a token), err[2] = the bad value.
// The first report wins; the entry reads the slot after the launch and throws.
__device__ __forceinline__ void report_error(int* err, int64_t where, int value) {
  if (atomicCAS(err, 0, 1) == 0) {
    err[1] = static_cast<int>(where);
    err[2] = value;
  }
}

inline int ceil_div(int64_t a, int64_t b) { return static_cast<int>((a + b - 1) / b); }

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

}  // namespace seqpar::cuda_kernels

namespace seqpar::cuda_kernels {

// Calls f(T{}) with T = float, bf16 or f16 for a float DType (entries have checked the dtype).
template <typename F>
void dispatch_float(DType dt, F&& f) {
  if (dt == DType::kBF16) {
    f(bf16{});
  } else if (dt == DType::kF16) {
    f(f16{});
  } else {
    f(float{});
  }
}

}  // namespace seqpar::cuda_kernels
