// GELU, erf form and tanh approximation (the spec: kernels/cpu/gelu.h), and its backward.
// Elementwise, 16-byte packs plus a scalar tail; f32 arithmetic (erff, tanhf, expf: the precise
// library functions) on bf16, f16 or f32 storage.
#include <type_traits>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launchers.h"

namespace seqpar::cuda_kernels {

namespace {

constexpr int kThreads = 256;
constexpr float kSqrt2OverPi = 0.79788456080286535588f;
constexpr float kInvSqrt2 = 0.70710678118654752440f;
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;
constexpr float kCubic = 0.044715f;

template <bool kTanh>
__device__ __forceinline__ float gelu(float x) {
  if constexpr (kTanh) {
    const float u = kSqrt2OverPi * (x + kCubic * x * x * x);
    return 0.5f * x * (1.f + tanhf(u));
  } else {
    return 0.5f * x * (1.f + erff(x * kInvSqrt2));
  }
}

// The derivative; its second term is 0 once the saturating factor is (so a huge |x| cannot make 0 * inf).
template <bool kTanh>
__device__ __forceinline__ float gelu_grad(float x) {
  if constexpr (kTanh) {
    const float u = kSqrt2OverPi * (x + kCubic * x * x * x);
    const float th = tanhf(u);
    const float sech2 = 1.f - th * th;
    const float second = sech2 == 0.f ? 0.f : 0.5f * x * sech2 * kSqrt2OverPi * (1.f + 3.f * kCubic * x * x);
    return 0.5f * (1.f + th) + second;
  } else {
    const float cdf = 0.5f * (1.f + erff(x * kInvSqrt2));
    const float pdf = kInvSqrt2Pi * expf(-0.5f * x * x);
    return cdf + (pdf == 0.f ? 0.f : x * pdf);
  }
}

template <bool kTanh, int M, typename T>
__device__ __forceinline__ void gelu_forward_elems(T* out, const T* inp) {
  float v[M];
  load_pack<M>(v, inp);
#pragma unroll
  for (int k = 0; k < M; ++k) v[k] = gelu<kTanh>(v[k]);
  store_pack<M>(out, v);
}

template <bool kTanh, int M, typename T>
__device__ __forceinline__ void gelu_backward_elems(T* dinp, const T* dout, const T* inp) {
  float d[M], v[M];
  load_pack<M>(d, dout);
  load_pack<M>(v, inp);
#pragma unroll
  for (int k = 0; k < M; ++k) d[k] *= gelu_grad<kTanh>(v[k]);
  store_pack<M>(dinp, d);
}

// Threads [0, n/N) take one N-pack each; the next n % N threads take the scalar tail. No
// __restrict__: an output may alias its input (in place), which per-thread read-then-write allows.
template <bool kTanh, int N, typename T>
__global__ void gelu_forward_kernel(T* out, const T* inp, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x, packs = n / N;
  if (i < packs) {
    gelu_forward_elems<kTanh, N>(out + i * N, inp + i * N);
  } else if (const int64_t j = packs * N + (i - packs); j < n) {
    gelu_forward_elems<kTanh, 1>(out + j, inp + j);
  }
}

template <bool kTanh, int N, typename T>
__global__ void gelu_backward_kernel(T* dinp, const T* dout, const T* inp, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x, packs = n / N;
  if (i < packs) {
    gelu_backward_elems<kTanh, N>(dinp + i * N, dout + i * N, inp + i * N);
  } else if (const int64_t j = packs * N + (i - packs); j < n) {
    gelu_backward_elems<kTanh, 1>(dinp + j, dout + j, inp + j);
  }
}

int elementwise_blocks(int64_t n, int N) { return ceil_div(n / N + n % N, kThreads); }

template <typename F>
void dispatch_kind(bool tanh_approx, F&& f) {
  if (tanh_approx) {
    f(std::true_type{});
  } else {
    f(std::false_type{});
  }
}

}  // namespace

void gelu_forward(void* out, const void* inp, DType dt, int64_t n, bool tanh_approx, cudaStream_t stream) {
  if (n == 0) return;
  const bool vec = aligned16(out) && aligned16(inp);
  dispatch_float(dt, [&](auto tag) {
    dispatch_kind(tanh_approx, [&](auto kind) {
      using T = decltype(tag);
      constexpr bool kTanh = decltype(kind)::value;
      if (vec) {
        gelu_forward_kernel<kTanh, 8>
            <<<elementwise_blocks(n, 8), kThreads, 0, stream>>>(static_cast<T*>(out), static_cast<const T*>(inp), n);
      } else {
        gelu_forward_kernel<kTanh, 1>
            <<<elementwise_blocks(n, 1), kThreads, 0, stream>>>(static_cast<T*>(out), static_cast<const T*>(inp), n);
      }
      SEQPAR_LAUNCH_CHECK();
    });
  });
}

void gelu_backward(void* dinp, const void* dout, const void* inp, DType dt, int64_t n, bool tanh_approx,
                   cudaStream_t stream) {
  if (n == 0) return;
  const bool vec = aligned16(dinp) && aligned16(dout) && aligned16(inp);
  dispatch_float(dt, [&](auto tag) {
    dispatch_kind(tanh_approx, [&](auto kind) {
      using T = decltype(tag);
      constexpr bool kTanh = decltype(kind)::value;
      if (vec) {
        gelu_backward_kernel<kTanh, 8><<<elementwise_blocks(n, 8), kThreads, 0, stream>>>(
            static_cast<T*>(dinp), static_cast<const T*>(dout), static_cast<const T*>(inp), n);
      } else {
        gelu_backward_kernel<kTanh, 1><<<elementwise_blocks(n, 1), kThreads, 0, stream>>>(
            static_cast<T*>(dinp), static_cast<const T*>(dout), static_cast<const T*>(inp), n);
      }
      SEQPAR_LAUNCH_CHECK();
    });
  });
}

}  // namespace seqpar::cuda_kernels
