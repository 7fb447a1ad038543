// Small kernels around the flash-attention kernels: per-tile mask statistics, the backward's
// pre-pass and dq finish, and the LSE merge of partial attention results.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>

#include "attention/cuda/attn_common.cuh"
#include "attention/cuda/attn_launch.h"
#include "core/cuda_check.h"

namespace seqpar::cuda_attn {

namespace {

using namespace dev;

// One warp per tile: {min seg, max seg, min pos, max pos} over the tile's tokens; with `runs`, also whether the tile is
// one run (launch_tile_stats).
__global__ void tile_stats_kernel(int4* __restrict__ stats, int32_t* __restrict__ runs, const int32_t* __restrict__ seg,
                                  const int32_t* __restrict__ pos, int64_t T, int tile, int64_t ntiles) {
  const int lane = threadIdx.x & 31;
  const int64_t ti = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + (threadIdx.x >> 5);
  if (ti >= ntiles) return;
  int smin = INT_MAX, smax = INT_MIN, pmin = INT_MAX, pmax = INT_MIN;
  const int64_t start = ti * tile, end = std::min<int64_t>(T, (ti + 1) * tile);
  const int p0 = pos[start];
  bool run = true;  // this lane's tokens so far: pos = p0 + offset in the tile
  for (int64_t i = start + lane; i < end; i += 32) {
    const int s = seg[i], p = pos[i];
    smin = min(smin, s);
    smax = max(smax, s);
    pmin = min(pmin, p);
    pmax = max(pmax, p);
    run = run && static_cast<int64_t>(p) == p0 + (i - start);
  }
  run = __all_sync(0xffffffffu, run);
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    smin = min(smin, __shfl_xor_sync(0xffffffffu, smin, off));
    smax = max(smax, __shfl_xor_sync(0xffffffffu, smax, off));
    pmin = min(pmin, __shfl_xor_sync(0xffffffffu, pmin, off));
    pmax = max(pmax, __shfl_xor_sync(0xffffffffu, pmax, off));
  }
  if (lane == 0) {
    stats[ti] = make_int4(smin, smax, pmin, pmax);
    if (runs != nullptr) runs[ti] = run && smin == smax ? 1 : 0;
  }
}

// Pre-pass, one warp per (query row i < Tq_pad, head h):
//   delta[h][i] = sum_d dout[i,h,d] * out[i,h,d],  lse2[h][i] = lse[i,h] * log2e,
// with lse = -inf (a row that sees nothing) mapped to +inf so that exp2(s - lse2) = 0; padded rows
// (i >= Tq) get delta 0, lse2 +inf. dout (and a 16-bit out) are E.
template <Elem E>
__global__ void bwd_prep_kernel(const uint16_t* __restrict__ dout, const void* __restrict__ out, bool out_f32,
                                const float* __restrict__ lse, float* __restrict__ lse2, float* __restrict__ delta,
                                int Tq, int Tq_pad, int H, int D, bool lane_order) {
  const int lane = threadIdx.x & 31;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + (threadIdx.x >> 5);
  if (row >= static_cast<int64_t>(Tq_pad) * H) return;
  const int i = static_cast<int>(row / H), h = static_cast<int>(row % H);
  float acc = 0.f;
  if (i < Tq) {
    const int64_t base = (static_cast<int64_t>(i) * H + h) * D;
    for (int d = 2 * lane; d < D; d += 64) {
      const uint32_t dob = *reinterpret_cast<const uint32_t*>(dout + base + d);
      float o0, o1;
      if (out_f32) {
        const float2 ov = *reinterpret_cast<const float2*>(static_cast<const float*>(out) + base + d);
        o0 = ov.x;
        o1 = ov.y;
      } else {
        const uint32_t ob = *reinterpret_cast<const uint32_t*>(static_cast<const uint16_t*>(out) + base + d);
        o0 = bits_to_f32<E>(static_cast<uint16_t>(ob & 0xffffu));
        o1 = bits_to_f32<E>(static_cast<uint16_t>(ob >> 16));
      }
      acc += bits_to_f32<E>(static_cast<uint16_t>(dob & 0xffffu)) * o0 +
             bits_to_f32<E>(static_cast<uint16_t>(dob >> 16)) * o1;
    }
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  if (lane == 0) {
    const int64_t idx = static_cast<int64_t>(h) * Tq_pad + (lane_order ? (i & ~15) + stats_lane_slot(i & 15) : i);
    if (i < Tq) {
      const float L = lse[static_cast<int64_t>(i) * H + h];
      lse2[idx] = L == -INFINITY ? INFINITY : L * kLog2e;
      delta[idx] = acc;
    } else {
      lse2[idx] = INFINITY;
      delta[idx] = 0.f;
    }
  }
}

// Elements 4 i .. 4 i + 3 of dq (+)= v: added to dq, or stored when `write` (dq not read); a 16-bit dq is E.
template <Elem E>
__device__ __forceinline__ void dq_store4(void* __restrict__ dq, bool f32, bool write, int64_t i, float4 v) {
  if (f32) {
    float4* d = reinterpret_cast<float4*>(dq) + i;
    if (!write) {
      const float4 o = *d;
      v = make_float4(o.x + v.x, o.y + v.y, o.z + v.z, o.w + v.w);
    }
    *d = v;
  } else {
    uint2* d = reinterpret_cast<uint2*>(dq) + i;
    if (!write) {
      const uint2 o = *d;
      v = make_float4(bits_to_f32<E>(static_cast<uint16_t>(o.x & 0xffffu)) + v.x,
                      bits_to_f32<E>(static_cast<uint16_t>(o.x >> 16)) + v.y,
                      bits_to_f32<E>(static_cast<uint16_t>(o.y & 0xffffu)) + v.z,
                      bits_to_f32<E>(static_cast<uint16_t>(o.y >> 16)) + v.w);
    }
    *d = make_uint2(pack2<E>(v.x, v.y), pack2<E>(v.z, v.w));
  }
}

// dq += scale * dq_acc, or dq = scale * dq_acc when `write` (dq not read), 4 elements per thread
// (n % 4 == 0); a 16-bit dq is E.
template <Elem E>
__global__ void dq_finish_kernel(void* __restrict__ dq, bool f32, bool write, const float* __restrict__ acc,
                                 float scale, int64_t n4) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n4;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float4 a = reinterpret_cast<const float4*>(acc)[i];
    dq_store4<E>(dq, f32, write, i, make_float4(scale * a.x, scale * a.y, scale * a.z, scale * a.w));
  }
}

// The same, 8 elements per thread (n % 8 == 0), from dq_acc whose 8 columns are in the lanes' order: a = its
// columns 0, 2, 4, 6 and b = 1, 3, 5, 7.
template <Elem E>
__global__ void dq_finish_lanes_kernel(void* __restrict__ dq, bool f32, bool write, const float* __restrict__ acc,
                                       float scale, int64_t n8) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n8;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float4 a = reinterpret_cast<const float4*>(acc)[2 * i], b = reinterpret_cast<const float4*>(acc)[2 * i + 1];
    dq_store4<E>(dq, f32, write, 2 * i, make_float4(scale * a.x, scale * b.x, scale * a.y, scale * b.y));
    dq_store4<E>(dq, f32, write, 2 * i + 1, make_float4(scale * a.z, scale * b.z, scale * a.w, scale * b.w));
  }
}

// One warp per (token, head) row:
//   lse' = log(exp(lse_acc) + exp(lse_part)),  out' = out_acc exp(lse_acc - lse') + out_part exp(lse_part - lse').
// An empty part (-inf) leaves the row alone; an empty accumulator takes the part as is without
// reading its own out (which may be uninitialised); two empties give out 0 (0 bits in both 16-bit
// types), lse -inf. 16-bit values are E (an fp16 run's ring: f16 partials into f32 accumulators).
template <Elem E>
__device__ __forceinline__ uint16_t to_bits(float x) {
  return static_cast<uint16_t>(pack2<E>(x, 0.f) & 0xffffu);
}

template <Elem E>
__global__ void merge_kernel(void* __restrict__ out_acc, float* __restrict__ lse_acc, const void* __restrict__ out_part,
                             const float* __restrict__ lse_part, int64_t rows, int D, bool acc_f32, bool part_f32) {
  const int lane = threadIdx.x & 31;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + (threadIdx.x >> 5);
  if (row >= rows) return;
  const float la = lse_acc[row], lp = lse_part[row];
  if (lp == -INFINITY) {
    if (la == -INFINITY) {  // two empties: out 0 (the accumulator's out may be uninitialised)
      for (int d = lane; d < D; d += 32) {
        if (acc_f32) {
          static_cast<float*>(out_acc)[row * D + d] = 0.f;
        } else {
          static_cast<uint16_t*>(out_acc)[row * D + d] = 0;
        }
      }
    }
    return;
  }
  float wa = 0.f, wp = 1.f, ln = lp;
  if (la != -INFINITY) {
    const float mx = fmaxf(la, lp);
    ln = mx + logf(expf(la - mx) + expf(lp - mx));
    wa = expf(la - ln);
    wp = expf(lp - ln);
  }
  const int64_t base = row * D;
  for (int d = lane; d < D; d += 32) {
    float a = 0.f, b;
    if (la != -INFINITY) {
      a = acc_f32 ? static_cast<const float*>(out_acc)[base + d]
                  : bits_to_f32<E>(static_cast<const uint16_t*>(out_acc)[base + d]);
    }
    b = part_f32 ? static_cast<const float*>(out_part)[base + d]
                 : bits_to_f32<E>(static_cast<const uint16_t*>(out_part)[base + d]);
    const float r = wa * a + wp * b;
    if (acc_f32) {
      static_cast<float*>(out_acc)[base + d] = r;
    } else {
      static_cast<uint16_t*>(out_acc)[base + d] = to_bits<E>(r);
    }
  }
  __syncwarp();
  if (lane == 0) lse_acc[row] = ln;
}

}  // namespace

void launch_tile_stats(int4* stats, const int32_t* seg, const int32_t* pos, int64_t T, int tile, cudaStream_t stream,
                       int32_t* runs) {
  const int64_t ntiles = (T + tile - 1) / tile;
  if (ntiles == 0) return;
  const int per_block = 8;
  tile_stats_kernel<<<static_cast<unsigned>((ntiles + per_block - 1) / per_block), per_block * 32, 0, stream>>>(
      stats, runs, seg, pos, T, tile, ntiles);
  SEQPAR_LAUNCH_CHECK();
}

void launch_bwd_prep(const BwdParams& p, int Tq_pad, cudaStream_t stream, bool lane_order) {
  if (p.Tq == 0 || p.H == 0) return;
  SEQPAR_CUDA_CHECK(
      cudaMemsetAsync(p.dq_acc, 0, static_cast<size_t>(p.Tq) * p.H * p.D * sizeof(float), stream));
  const int64_t rows = static_cast<int64_t>(Tq_pad) * p.H;
  const int per_block = 8;
  const unsigned blocks = static_cast<unsigned>((rows + per_block - 1) / per_block);
  auto kernel = p.elem == Elem::kF16 ? bwd_prep_kernel<Elem::kF16> : bwd_prep_kernel<Elem::kBf16>;
  kernel<<<blocks, per_block * 32, 0, stream>>>(p.dout, p.out, p.out_f32, p.lse, p.lse2, p.delta, p.Tq, Tq_pad, p.H,
                                                p.D, lane_order);
  SEQPAR_LAUNCH_CHECK();
}

void launch_dq_finish(const BwdParams& p, cudaStream_t stream, bool lane_order) {
  const int64_t n4 = static_cast<int64_t>(p.Tq) * p.H * p.D / 4;
  if (n4 == 0) return;
  const int threads = 256;
  if (lane_order) {
    const int64_t n8 = n4 / 2;
    const int64_t blocks = std::min<int64_t>((n8 + threads - 1) / threads, 132 * 16);
    auto kernel = p.elem == Elem::kF16 ? dq_finish_lanes_kernel<Elem::kF16> : dq_finish_lanes_kernel<Elem::kBf16>;
    kernel<<<static_cast<unsigned>(blocks), threads, 0, stream>>>(p.dq, p.grad_f32, p.write_grads, p.dq_acc, p.scale,
                                                                  n8);
    SEQPAR_LAUNCH_CHECK();
    return;
  }
  const int64_t blocks = std::min<int64_t>((n4 + threads - 1) / threads, 132 * 16);
  auto kernel = p.elem == Elem::kF16 ? dq_finish_kernel<Elem::kF16> : dq_finish_kernel<Elem::kBf16>;
  kernel<<<static_cast<unsigned>(blocks), threads, 0, stream>>>(p.dq, p.grad_f32, p.write_grads, p.dq_acc, p.scale, n4);
  SEQPAR_LAUNCH_CHECK();
}

void launch_merge(void* out_acc, float* lse_acc, const void* out_part, const float* lse_part, int64_t rows, int D,
                  bool acc_f32, bool part_f32, Elem elem, cudaStream_t stream) {
  if (rows == 0) return;
  const int per_block = 8;
  auto kernel = elem == Elem::kF16 ? merge_kernel<Elem::kF16> : merge_kernel<Elem::kBf16>;
  kernel<<<static_cast<unsigned>((rows + per_block - 1) / per_block), per_block * 32, 0, stream>>>(
      out_acc, lse_acc, out_part, lse_part, rows, D, acc_f32, part_f32);
  SEQPAR_LAUNCH_CHECK();
}

}  // namespace seqpar::cuda_attn
