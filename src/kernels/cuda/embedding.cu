// Embedding lookup and its gradient.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launchers.h"

namespace seqpar::cuda_kernels {

namespace {

constexpr int kThreads = 256;

// One thread per N-element pack of an output row. An id outside [0, V) is reported and its row
// left unwritten (the entry throws).
template <int N, typename TO, typename TW>
__global__ void embedding_forward_kernel(TO* __restrict__ out,          // [T, C]
                                         const int32_t* __restrict__ ids,  // [T]
                                         const TW* __restrict__ wte,    // [V, C]
                                         int64_t T, int64_t C, int64_t V, int* err) {
  const int64_t packs = C / N;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= T * packs) return;
  const int64_t t = i / packs, p = i % packs;
  const int32_t id = ids[t];
  if (id < 0 || id >= V) {
    if (p == 0) report_error(err, t, id);
    return;
  }
  float v[N];
  load_pack<N>(v, wte + id * C + p * N);
  store_pack<N>(out + t * C + p * N, v);
}

// Deterministic and sort-free: vocabulary rows are owned by blocks (row v by block v % gridDim.x).
// Every block scans all T ids in order, compacts the tokens whose row it owns (ballot + prefix
// count, so they stay in increasing t), and adds their dout rows into dwte. Each dwte row thus has
// one writer and a fixed summation order (increasing t): bitwise reproducible, no atomics. A very
// frequent id makes its block do more of the work; that costs time, not correctness. The ids scan
// costs gridDim.x * T * 4 bytes of L2 reads (16K tokens, 1056 blocks: 70 MB, a few microseconds).
template <int N, typename TG, typename TD>
__global__ void __launch_bounds__(kThreads) embedding_backward_kernel(TG* __restrict__ dwte,  // [V, C]
                                                                      const TD* __restrict__ dout,  // [T, C]
                                                                      const int32_t* __restrict__ ids,  // [T]
                                                                      int64_t T, int64_t C, int64_t V, int* err) {
  __shared__ int s_tok[kThreads];
  __shared__ int s_count[kThreads / kWarp];
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int owners = gridDim.x;
  const int64_t packs = C / N;
  for (int64_t base = 0; base < T; base += kThreads) {
    const int64_t t = base + threadIdx.x;
    bool mine = false;
    if (t < T) {
      const int32_t id = ids[t];
      if (id < 0 || id >= V) {
        if (blockIdx.x == 0) report_error(err, t, id);
      } else {
        mine = id % owners == static_cast<int>(blockIdx.x);
      }
    }
    const unsigned ballot = __ballot_sync(0xffffffffu, mine);
    if (lane == 0) s_count[warp] = __popc(ballot);
    __syncthreads();
    int offset = 0, total = 0;
#pragma unroll
    for (int w = 0; w < kThreads / kWarp; ++w) {
      offset += w < warp ? s_count[w] : 0;
      total += s_count[w];
    }
    if (mine) s_tok[offset + __popc(ballot & ((1u << lane) - 1u))] = static_cast<int>(t);
    __syncthreads();
    for (int j = 0; j < total; ++j) {
      const int64_t tt = s_tok[j];
      const int64_t row = ids[tt];
      const TD* src = dout + tt * C;
      TG* dst = dwte + row * C;
      for (int64_t p = threadIdx.x; p < packs; p += kThreads) {  // each column has one thread: ordered
        float g[N], acc[N];
        load_pack<N>(g, src + p * N);
        load_pack<N>(acc, dst + p * N);
#pragma unroll
        for (int k = 0; k < N; ++k) acc[k] += g[k];
        store_pack<N>(dst + p * N, acc);
      }
    }
    __syncthreads();  // s_tok and s_count are refilled by the next chunk
  }
}

}  // namespace

void embedding_forward(void* out, DType out_dt, const int32_t* ids, const void* wte, DType wte_dt, int64_t T,
                       int64_t C, int64_t V, int* err, cudaStream_t stream) {
  if (T == 0 || C == 0) return;
  const bool vec = C % 8 == 0 && aligned16(out) && aligned16(wte);
  dispatch_float(out_dt, [&](auto to) {
    dispatch_float(wte_dt, [&](auto tw) {
      using TO = decltype(to);
      using TW = decltype(tw);
      if (vec) {
        embedding_forward_kernel<8><<<ceil_div(T * (C / 8), kThreads), kThreads, 0, stream>>>(
            static_cast<TO*>(out), ids, static_cast<const TW*>(wte), T, C, V, err);
      } else {
        embedding_forward_kernel<1><<<ceil_div(T * C, kThreads), kThreads, 0, stream>>>(
            static_cast<TO*>(out), ids, static_cast<const TW*>(wte), T, C, V, err);
      }
      SEQPAR_LAUNCH_CHECK();
    });
  });
}

void embedding_backward(void* dwte, DType dwte_dt, const void* dout, DType dout_dt, const int32_t* ids, int64_t T,
                        int64_t C, int64_t V, int* err, cudaStream_t stream) {
  if (T == 0 || C == 0) return;
  const bool vec = C % 8 == 0 && aligned16(dwte) && aligned16(dout);
  const int blocks = static_cast<int>(V < int64_t{8} * num_sms() ? V : int64_t{8} * num_sms());
  dispatch_float(dwte_dt, [&](auto tg) {
    dispatch_float(dout_dt, [&](auto td) {
      using TG = decltype(tg);
      using TD = decltype(td);
      if (vec) {
        embedding_backward_kernel<8><<<blocks, kThreads, 0, stream>>>(static_cast<TG*>(dwte),
                                                                       static_cast<const TD*>(dout), ids, T, C, V, err);
      } else {
        embedding_backward_kernel<1><<<blocks, kThreads, 0, stream>>>(static_cast<TG*>(dwte),
                                                                       static_cast<const TD*>(dout), ids, T, C, V, err);
      }
      SEQPAR_LAUNCH_CHECK();
    });
  });
}

}  // namespace seqpar::cuda_kernels
