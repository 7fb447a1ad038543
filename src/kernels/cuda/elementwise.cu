// Elementwise ops (add, scale, cast, uniform fill) and the deterministic sum of squares.
#include <atomic>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launchers.h"
#include "kernels/normal_draw.h"

namespace seqpar::cuda_kernels {

int num_sms() {
  static std::atomic<int> cache[64] = {};
  int dev = 0;
  SEQPAR_CUDA_CHECK(cudaGetDevice(&dev));
  int n = dev < 64 ? cache[dev].load() : 0;
  if (n == 0) {
    SEQPAR_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
    if (dev < 64) cache[dev] = n;
  }
  return n;
}

namespace {

constexpr int kThreads = 256;

int elementwise_blocks(int64_t n, int N) { return ceil_div(n / N + n % N, kThreads); }

// Threads [0, n/N) take one N-pack each; the next n % N threads take the scalar tail. CALL_PACK
// does N elements from offset o, CALL_ONE the one element at o.
#define SEQPAR_ELEMENTWISE_BODY(N, n, CALL_PACK, CALL_ONE)                                     \
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x, packs = (n) / (N); \
  if (i < packs) {                                                                             \
    const int64_t o = i * (N);                                                                 \
    CALL_PACK;                                                                                 \
  } else if (const int64_t o = packs * (N) + (i - packs); o < (n)) {                           \
    CALL_ONE;                                                                                  \
  }

template <int M, typename TY, typename TX>
__device__ __forceinline__ void add_elems(TY* y, const TX* x) {
  float a[M], b[M];
  load_pack<M>(a, y);
  load_pack<M>(b, x);
#pragma unroll
  for (int k = 0; k < M; ++k) a[k] += b[k];
  store_pack<M>(y, a);
}

template <int N, typename TY, typename TX>
__global__ void add_kernel(TY* y, const TX* x, int64_t n) {
  SEQPAR_ELEMENTWISE_BODY(N, n, (add_elems<N>(y + o, x + o)), (add_elems<1>(y + o, x + o)))
}

template <int M, typename T>
__device__ __forceinline__ void scale_elems(T* y, float s) {
  float a[M];
  load_pack<M>(a, y);
#pragma unroll
  for (int k = 0; k < M; ++k) a[k] *= s;
  store_pack<M>(y, a);
}

template <int N, typename T>
__global__ void scale_kernel(T* y, float s, int64_t n) {
  SEQPAR_ELEMENTWISE_BODY(N, n, (scale_elems<N>(y + o, s)), (scale_elems<1>(y + o, s)))
}

template <int M, typename TO, typename TI>
__device__ __forceinline__ void cast_elems(TO* out, const TI* in) {
  float a[M];
  load_pack<M>(a, in);
  store_pack<M>(out, a);
}

template <int N, typename TO, typename TI>
__global__ void cast_kernel(TO* __restrict__ out, const TI* __restrict__ in, int64_t n) {
  SEQPAR_ELEMENTWISE_BODY(N, n, (cast_elems<N>(out + o, in + o)), (cast_elems<1>(out + o, in + o)))
}

// y[t, n] += b[n]: one thread per element.
template <typename TY, typename TB>
__global__ void bias_forward_kernel(TY* __restrict__ y, const TB* __restrict__ b, int64_t T, int64_t N) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= T * N) return;
  y[i] = from_f32<TY>(to_f32(y[i]) + to_f32(b[i % N]));
}

// partials[blockIdx.y, n] = sum of dy[t, n] over the rows of row block blockIdx.y, in row order;
// consecutive threads take consecutive columns (coalesced reads).
template <typename T>
__global__ void bias_partials_kernel(float* __restrict__ partials, const T* __restrict__ dy, int64_t T_, int64_t N) {
  const int64_t n = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (n >= N) return;
  const int64_t t0 = static_cast<int64_t>(blockIdx.y) * kBiasRows;
  const int64_t t1 = t0 + kBiasRows < T_ ? t0 + kBiasRows : T_;
  float acc = 0.f;
  for (int64_t t = t0; t < t1; ++t) acc += to_f32(dy[t * N + n]);
  partials[blockIdx.y * N + n] = acc;
}

// db[n] += sum of the partials of column n, in block order.
__global__ void bias_finish_kernel(float* __restrict__ db, const float* __restrict__ partials, int64_t blocks,
                                   int64_t N) {
  const int64_t n = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (n >= N) return;
  float acc = 0.f;
  for (int64_t r = 0; r < blocks; ++r) acc += partials[r * N + n];
  db[n] += acc;
}

// splitmix64 finaliser: a counter-based generator, so values depend on (seed, index) only.
__device__ __forceinline__ uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

template <typename T>
__global__ void fill_uniform_kernel(T* out, int64_t n, uint64_t seed, float lo, float hi) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const uint64_t r = mix64(seed * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(i));
  const float u = static_cast<float>(r >> 40) * (1.f / 16777216.f);  // 24 bits: [0, 1)
  out[i] = from_f32<T>(lo + (hi - lo) * u);
}

// First pass: a fixed grid of kSumSquaresBlocks blocks; thread g takes packs g, g + stride, ...;
// each block writes its sum. The assignment and the reduction order depend on n only, so the
// result is bitwise reproducible.
template <int N, typename T>
__global__ void sum_squares_kernel(double* __restrict__ partials, const T* __restrict__ x, int64_t n) {
  __shared__ double scratch[kWarp];
  const int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x, packs = n / N;
  double acc = 0.0;
  for (int64_t i = g; i < packs; i += stride) {
    float v[N];
    load_pack<N>(v, x + i * N);
#pragma unroll
    for (int k = 0; k < N; ++k) acc += static_cast<double>(v[k]) * v[k];
  }
  for (int64_t j = packs * N + g; j < n; j += stride) {
    const double v = to_f32(x[j]);
    acc += v * v;
  }
  acc = block_sum(acc, scratch);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

// Second pass: one block adds the partials in a fixed order; the total goes to partials[blocks].
__global__ void sum_partials_kernel(double* partials, int blocks) {
  __shared__ double scratch[kWarp];
  double acc = 0.0;
  for (int b = threadIdx.x; b < blocks; b += blockDim.x) acc += partials[b];
  acc = block_sum(acc, scratch);
  if (threadIdx.x == 0) partials[blocks] = acc;
}

}  // namespace

void add_inplace(void* y, DType y_dt, const void* x, DType x_dt, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  const bool vec = aligned16(y) && aligned16(x);
  dispatch_float(y_dt, [&](auto ty) {
    dispatch_float(x_dt, [&](auto tx) {
      using TY = decltype(ty);
      using TX = decltype(tx);
      if (vec) {
        add_kernel<8><<<elementwise_blocks(n, 8), kThreads, 0, stream>>>(static_cast<TY*>(y),
                                                                         static_cast<const TX*>(x), n);
      } else {
        add_kernel<1><<<elementwise_blocks(n, 1), kThreads, 0, stream>>>(static_cast<TY*>(y),
                                                                         static_cast<const TX*>(x), n);
      }
      SEQPAR_LAUNCH_CHECK();
    });
  });
}

void bias_forward(void* y, DType y_dt, const void* b, DType b_dt, int64_t T, int64_t N, cudaStream_t stream) {
  if (T * N == 0) return;
  dispatch_float(y_dt, [&](auto ty) {
    dispatch_float(b_dt, [&](auto tb) {
      using TY = decltype(ty);
      using TB = decltype(tb);
      bias_forward_kernel<<<ceil_div(T * N, kThreads), kThreads, 0, stream>>>(static_cast<TY*>(y),
                                                                             static_cast<const TB*>(b), T, N);
      SEQPAR_LAUNCH_CHECK();
    });
  });
}

void bias_backward(float* db, const void* dy, DType dt, float* partials, int64_t T, int64_t N, cudaStream_t stream) {
  if (N == 0 || T == 0) return;
  const int64_t blocks = bias_row_blocks(T);
  dispatch_float(dt, [&](auto tag) {
    using TD = decltype(tag);
    const dim3 grid(static_cast<unsigned>(ceil_div(N, kThreads)), static_cast<unsigned>(blocks));
    bias_partials_kernel<<<grid, kThreads, 0, stream>>>(partials, static_cast<const TD*>(dy), T, N);
    SEQPAR_LAUNCH_CHECK();
  });
  bias_finish_kernel<<<ceil_div(N, kThreads), kThreads, 0, stream>>>(db, partials, blocks, N);
  SEQPAR_LAUNCH_CHECK();
}

void scale_inplace(void* y, DType dt, float s, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  const bool vec = aligned16(y);
  dispatch_float(dt, [&](auto tag) {
    using T = decltype(tag);
    if (vec) {
      scale_kernel<8><<<elementwise_blocks(n, 8), kThreads, 0, stream>>>(static_cast<T*>(y), s, n);
    } else {
      scale_kernel<1><<<elementwise_blocks(n, 1), kThreads, 0, stream>>>(static_cast<T*>(y), s, n);
    }
    SEQPAR_LAUNCH_CHECK();
  });
}

// One thread per pair (normal_draw.h: the CPU's expression, in double).
template <typename T>
__global__ void normal_fill_kernel(T* y, uint64_t key, float std, int64_t j0, int64_t n) {
  const int64_t pairs = (n + 1) / 2;
  for (int64_t p = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; p < pairs;
       p += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float a, b;
    normal_pair(key, j0 + p, std, a, b);
    y[2 * p] = from_f32<T>(a);
    if (2 * p + 1 < n) y[2 * p + 1] = from_f32<T>(b);
  }
}

void normal_fill(void* y, DType dt, uint64_t key, float std, int64_t offset, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  dispatch_float(dt, [&](auto tag) {
    using T = decltype(tag);
    const int64_t blocks = std::min<int64_t>(ceil_div((n + 1) / 2, kThreads), 65536);
    normal_fill_kernel<T><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(static_cast<T*>(y), key, std,
                                                                                 offset / 2, n);
    SEQPAR_LAUNCH_CHECK();
  });
}

void cast(void* out, DType out_dt, const void* in, DType in_dt, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  const bool vec = aligned16(out) && aligned16(in);
  dispatch_float(out_dt, [&](auto to) {
    dispatch_float(in_dt, [&](auto ti) {
      using TO = decltype(to);
      using TI = decltype(ti);
      if (vec) {
        cast_kernel<8><<<elementwise_blocks(n, 8), kThreads, 0, stream>>>(static_cast<TO*>(out),
                                                                          static_cast<const TI*>(in), n);
      } else {
        cast_kernel<1><<<elementwise_blocks(n, 1), kThreads, 0, stream>>>(static_cast<TO*>(out),
                                                                          static_cast<const TI*>(in), n);
      }
      SEQPAR_LAUNCH_CHECK();
    });
  });
}

void fill_uniform(void* out, DType dt, int64_t n, uint64_t seed, float lo, float hi, cudaStream_t stream) {
  if (n == 0) return;
  dispatch_float(dt, [&](auto tag) {
    using T = decltype(tag);
    fill_uniform_kernel<<<ceil_div(n, kThreads), kThreads, 0, stream>>>(static_cast<T*>(out), n, seed, lo, hi);
    SEQPAR_LAUNCH_CHECK();
  });
}

void sum_squares(double* scratch, const void* x, DType dt, int64_t n, cudaStream_t stream) {
  const bool vec = aligned16(x);
  dispatch_float(dt, [&](auto tag) {
    using T = decltype(tag);
    if (vec) {
      sum_squares_kernel<8><<<kSumSquaresBlocks, kThreads, 0, stream>>>(scratch, static_cast<const T*>(x), n);
    } else {
      sum_squares_kernel<1><<<kSumSquaresBlocks, kThreads, 0, stream>>>(scratch, static_cast<const T*>(x), n);
    }
    SEQPAR_LAUNCH_CHECK();
  });
  sum_partials_kernel<<<1, 1024, 0, stream>>>(scratch, kSumSquaresBlocks);
  SEQPAR_LAUNCH_CHECK();
}

}  // namespace seqpar::cuda_kernels
