// SwiGLU: out = silu(gate) * up, and its backward. Elementwise, 16-byte packs plus a scalar tail.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launchers.h"

#include <type_traits>

namespace seqpar::cuda_kernels {

namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float sigmoid(float x) { return 1.f / (1.f + expf(-x)); }

// One expression for the forward and the backward's recompute, so that both round the same f32 value.
__device__ __forceinline__ float silu_times(float g, float u) { return g * sigmoid(g) * u; }

template <int M, typename T>
__device__ __forceinline__ void swiglu_forward_elems(T* out, const T* gate, const T* up) {
  float g[M], u[M], y[M];
  load_pack<M>(g, gate);
  load_pack<M>(u, up);
#pragma unroll
  for (int k = 0; k < M; ++k) y[k] = silu_times(g[k], u[k]);
  store_pack<M>(out, y);
}

// With s = sigmoid(g): d silu(g)/dg = s * (1 + g * (1 - s)). With kOut also out = silu(g) * u again.
template <int M, bool kOut, typename T>
__device__ __forceinline__ void swiglu_backward_elems(T* dgate, T* dup, T* out, const T* dout, const T* gate,
                                                      const T* up) {
  float d[M], g[M], u[M], dg[M], du[M], y[M];
  load_pack<M>(d, dout);
  load_pack<M>(g, gate);
  load_pack<M>(u, up);
#pragma unroll
  for (int k = 0; k < M; ++k) {
    const float s = sigmoid(g[k]);
    dg[k] = d[k] * u[k] * s * (1.f + g[k] * (1.f - s));
    du[k] = d[k] * g[k] * s;
    if constexpr (kOut) y[k] = silu_times(g[k], u[k]);
  }
  store_pack<M>(dgate, dg);
  store_pack<M>(dup, du);
  if constexpr (kOut) store_pack<M>(out, y);
}

// Threads [0, n/N) take one N-pack each; the next n % N threads take the scalar tail. No
// __restrict__: an output may alias its own input (in place), which per-thread read-then-write allows.
template <int N, typename T>
__global__ void swiglu_forward_kernel(T* out, const T* gate, const T* up,
                                      int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x, packs = n / N;
  if (i < packs) {
    swiglu_forward_elems<N>(out + i * N, gate + i * N, up + i * N);
  } else if (const int64_t j = packs * N + (i - packs); j < n) {
    swiglu_forward_elems<1>(out + j, gate + j, up + j);
  }
}

template <int N, bool kOut, typename T>
__global__ void swiglu_backward_kernel(T* dgate, T* dup, T* out, const T* dout, const T* gate, const T* up,
                                       int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x, packs = n / N;
  if (i < packs) {
    swiglu_backward_elems<N, kOut>(dgate + i * N, dup + i * N, out + i * N, dout + i * N, gate + i * N, up + i * N);
  } else if (const int64_t j = packs * N + (i - packs); j < n) {
    swiglu_backward_elems<1, kOut>(dgate + j, dup + j, out + j, dout + j, gate + j, up + j);
  }
}

int elementwise_blocks(int64_t n, int N) { return ceil_div(n / N + n % N, kThreads); }

}  // namespace

void swiglu_forward(void* out, const void* gate, const void* up, DType dt, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  const bool vec = aligned16(out) && aligned16(gate) && aligned16(up);
  dispatch_float(dt, [&](auto tag) {
    using T = decltype(tag);
    if (vec) {
      swiglu_forward_kernel<8><<<elementwise_blocks(n, 8), kThreads, 0, stream>>>(
          static_cast<T*>(out), static_cast<const T*>(gate), static_cast<const T*>(up), n);
    } else {
      swiglu_forward_kernel<1><<<elementwise_blocks(n, 1), kThreads, 0, stream>>>(
          static_cast<T*>(out), static_cast<const T*>(gate), static_cast<const T*>(up), n);
    }
    SEQPAR_LAUNCH_CHECK();
  });
}

void swiglu_backward(void* dgate, void* dup, const void* dout, const void* gate, const void* up, void* out, DType dt,
                     int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  const bool vec = aligned16(dgate) && aligned16(dup) && aligned16(dout) && aligned16(gate) && aligned16(up) &&
                   (out == nullptr || aligned16(out));
  dispatch_float(dt, [&](auto tag) {
    using T = decltype(tag);
    auto launch = [&](auto pack, auto with_out) {
      constexpr int N = decltype(pack)::value;
      swiglu_backward_kernel<N, decltype(with_out)::value><<<elementwise_blocks(n, N), kThreads, 0, stream>>>(
          static_cast<T*>(dgate), static_cast<T*>(dup), static_cast<T*>(out), static_cast<const T*>(dout),
          static_cast<const T*>(gate), static_cast<const T*>(up), n);
    };
    auto with_pack = [&](auto pack) {
      out != nullptr ? launch(pack, std::true_type{}) : launch(pack, std::false_type{});
    };
    vec ? with_pack(std::integral_constant<int, 8>{}) : with_pack(std::integral_constant<int, 1>{});
    SEQPAR_LAUNCH_CHECK();
  });
}

}  // namespace seqpar::cuda_kernels
