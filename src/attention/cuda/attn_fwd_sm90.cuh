// Flash-attention forward kernel for Hopper (sm_90a), instantiated in attn_fwd_sm90.cu. One CTA per
// (BM-row query tile, query head): NWG consumer warpgroups of 64 query rows each, plus one producer
// warp that streams the visible BN-key tiles of the KV head into a STAGES-deep shared-memory ring
// (with NWG = 3 the producer warp's whole warpgroup is launched and gives its registers away).
//
// Producer: the tensor memory accelerator (cp.async.bulk.tensor, 3-D maps over [T, heads, D]) copies
//   Q once and K_j, V_j per stage as 64-column boxes, 128-byte swizzled; stage s has a `full`
//   mbarrier (transaction bytes) and an `empty` one (one arrival per consumer warp).
// Consumer warpgroup, per key tile j (FlashAttention-2 schedule, one warpgroup owns 64 rows):
//   S = Q K_j^T   wgmma m64n128k16, A and B from shared memory (both K-major), f32 in registers;
//   mask (boundary tiles only), online softmax in exp2 with the scale folded;
//   O += P V_j    wgmma m64nDk16, A = P as E (bf16 or f16) registers (the S accumulator layout is the A
//                 register layout), B = V_j MN-major (the transpose bit).
// Shared layout of a tile of R rows: for each 64-column half c, R rows of 128 bytes at
// c * R * 128, 16-byte chunk k of row r stored at chunk k ^ (r & 7) (the TMA / wgmma 128-byte
// swizzle); every tile starts at a multiple of 1024 bytes.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "attention/cuda/attn_common.cuh"
#include "attention/cuda/attn_launch.h"
#include "attention/cuda/sm90_ptx.cuh"  // mbarriers, tensor copies, descriptors, wgmma

namespace seqpar::cuda_attn::sm90 {

using namespace dev;

template <int D, int NWG, int STAGES>
struct Shape {
  static constexpr int BM = 64 * NWG;  // query rows per CTA
  static constexpr int BN = 128;       // keys per tile
  static constexpr int kConsumerWarps = 4 * NWG;
  // With 3 consumer warpgroups the producer is a whole warpgroup that hands most of its registers
  // to the consumers (setmaxnreg); with 2, one producer warp and no register moves.
  static constexpr bool kRegSplit = NWG >= 3;
  static constexpr int kProducerRegs = 24, kConsumerRegs = 160;
  static constexpr int kThreads = 32 * (kConsumerWarps + (kRegSplit ? 4 : 1));
  static constexpr uint32_t kQBytes = BM * D * 2;
  static constexpr uint32_t kKVBytes = BN * D * 2;  // one K or one V tile
  static constexpr uint32_t kBarOffset = kQBytes + 2 * STAGES * kKVBytes;
  // + 1024: the dynamic shared memory base is rounded up to 1024 bytes inside the kernel.
  static constexpr uint32_t kSmem = 1024 + kBarOffset + 8 * (2 * STAGES + 1);
};

// ---- the kernel ---------------------------------------------------------------------------
// q_stats per BM query rows, k_stats per BN keys (tile_stats of attn_launch.h).
template <Elem E, int D, int NWG, int STAGES>
__global__ void __launch_bounds__(Shape<D, NWG, STAGES>::kThreads, 1)
    fwd_sm90_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                    const __grid_constant__ CUtensorMap tm_v, const FwdParams p, const int4* __restrict__ q_stats,
                    const int4* __restrict__ k_stats) {
#if !defined(__CUDA_ARCH__) || defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using S = Shape<D, NWG, STAGES>;
  constexpr int BM = S::BM, BN = S::BN, NCW = S::kConsumerWarps;
  constexpr int HALVES = D / 64;  // 128-byte column halves of a row
  constexpr int SR = BN / 2;      // S accumulator registers per thread (m64 x BN over 128 threads)
  constexpr int OR = D / 2;       // O accumulator registers per thread
  static_assert(D == 64 || D == 128, "head dim 64 or 128");

  extern __shared__ uint8_t smem_raw[];
  const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u;
  const uint32_t sQ = base;
  const uint32_t bars = base + S::kBarOffset;
  auto sK = [&](int s) { return base + S::kQBytes + 2u * s * S::kKVBytes; };
  auto sV = [&](int s) { return base + S::kQBytes + (2u * s + 1u) * S::kKVBytes; };
  auto full = [&](int s) { return bars + 8u * s; };
  auto empty = [&](int s) { return bars + 8u * (STAGES + s); };
  const uint32_t qbar = bars + 8u * 2 * STAGES;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int qt = gridDim.x - 1 - blockIdx.x;  // heaviest causal tiles first
  const int h = blockIdx.y, hk = h / (p.H / p.Hkv);
  const int q0 = qt * BM;
  const int nkt = (p.Tk + BN - 1) / BN;
  const int4 qs = q_stats[qt];

  if (tid == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(full(s), 1);
      mbar_init(empty(s), NCW);
    }
    mbar_init(qbar, 1);
    mbar_init_fence();
  }
  __syncthreads();  // the last CTA-wide barrier: the producer warp leaves early

  // Producer and consumers walk the same sequence of visible key tiles.
  int j = next_visible<true>(qs, k_stats, nkt, 0, p.causal, p.window, lane);

  if (warp >= NCW) {  // ---- producer warp (the first of the producer warpgroup)
    if constexpr (S::kRegSplit) {
      asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(S::kProducerRegs));
      if (warp != NCW) return;
    }
    if (lane == 0 && j < nkt) {
      mbar_arrive_expect_tx(qbar, S::kQBytes);
#pragma unroll
      for (int c = 0; c < HALVES; ++c) tma_load_3d(sQ + c * BM * 128, &tm_q, qbar, c * 64, h, q0);
    }
    for (int it = 0; j < nkt; ++it) {
      const int s = it % STAGES;
      if (lane == 0) {
        mbar_wait(empty(s), ((it / STAGES) & 1) ^ 1);  // the consumers are done with its last use
        mbar_arrive_expect_tx(full(s), 2 * S::kKVBytes);
#pragma unroll
        for (int c = 0; c < HALVES; ++c) {
          tma_load_3d(sK(s) + c * BN * 128, &tm_k, full(s), c * 64, hk, j * BN);
          tma_load_3d(sV(s) + c * BN * 128, &tm_v, full(s), c * 64, hk, j * BN);
        }
      }
      __syncwarp();
      j = next_visible<true>(qs, k_stats, nkt, j + 1, p.causal, p.window, lane);
    }
    return;
  }

  if constexpr (S::kRegSplit) asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(S::kConsumerRegs));

  // ---- consumer warpgroups. Accumulator layout (m64nN f32): warp w of the warpgroup holds rows
  // 16w + g and 16w + g + 8 (g = lane / 4, t = lane % 4); register 4n + 2hr + e is row
  // 16w + g + 8hr, column 8n + 2t + e.
  const int wg = warp >> 2;
  const int g = lane >> 2, t = lane & 3;
  const int row0 = wg * 64 + (warp & 3) * 16 + g;  // this thread's first row in the tile (+8: second)
  const float sl2 = p.scale * kLog2e;
  const uint32_t sQw = sQ + wg * 64 * 128;  // this warpgroup's 64 rows of Q

  float o[OR];
#pragma unroll
  for (int i = 0; i < OR; ++i) o[i] = 0.f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};

  if (j < nkt) mbar_wait(qbar, 0);
  for (int it = 0; j < nkt; ++it) {
    const int jn = next_visible<true>(qs, k_stats, nkt, j + 1, p.causal, p.window, lane);
    const int cls = tile_class(qs, k_stats[j], p.causal, p.window, (j + 1) * BN > p.Tk);
    const int s = it % STAGES;
    mbar_wait(full(s), (it / STAGES) & 1);

    // S = Q K_j^T: D / 16 steps of k16; within a 128-byte half a step moves 32 bytes.
    float sc[SR];
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const uint64_t da = smem_desc(sQw + (kk >> 2) * (BM * 128) + (kk & 3) * 32, 16, 1024);
      const uint64_t db = smem_desc(sK(s) + (kk >> 2) * (BN * 128) + (kk & 3) * 32, 16, 1024);
      wgmma_ss_n128<E>(sc, da, db, kk > 0 ? 1 : 0);
    }
    wgmma_commit();
    wgmma_wait_all();
    reg_fence(sc);

    // Boundary tile: element-wise mask (out-of-range keys and rows are masked too).
    if (cls == kPartial) {
      int qseg[2], qpos[2];
      bool qok[2];
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const int r = q0 + row0 + 8 * hr;
        qok[hr] = r < p.Tq;
        qseg[hr] = qok[hr] ? p.q_seg[r] : 0;
        qpos[hr] = qok[hr] ? p.q_pos[r] : 0;
      }
#pragma unroll
      for (int n = 0; n < BN / 8; ++n)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int c = j * BN + n * 8 + 2 * t + e;
          const bool cok = c < p.Tk;
          const int kseg = cok ? p.k_seg[c] : 0;
          const int kpos = cok ? p.k_pos[c] : 0;
#pragma unroll
          for (int hr = 0; hr < 2; ++hr) {
            const bool vis = cok && qok[hr] && elem_visible(qseg[hr], qpos[hr], kseg, kpos, p.causal, p.window);
            if (!vis) sc[4 * n + 2 * hr + e] = -INFINITY;
          }
        }
    }

    // Online softmax. A row whose keys are all masked so far keeps m = -inf, l = 0, O = 0.
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      float mx = m[hr];
#pragma unroll
      for (int n = 0; n < BN / 8; ++n) mx = fmaxf(mx, fmaxf(sc[4 * n + 2 * hr], sc[4 * n + 2 * hr + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float corr = mx == -INFINITY ? 1.f : fast_exp2((m[hr] - mx) * sl2);
      const float msc = mx == -INFINITY ? 0.f : mx * sl2;
      m[hr] = mx;
      float rs = 0.f;
#pragma unroll
      for (int n = 0; n < BN / 8; ++n)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float pv = fast_exp2(fmaf(sc[4 * n + 2 * hr + e], sl2, -msc));
          sc[4 * n + 2 * hr + e] = pv;
          rs += pv;
        }
      l[hr] = l[hr] * corr + rs;
#pragma unroll
      for (int n = 0; n < D / 8; ++n) {
        o[4 * n + 2 * hr] *= corr;
        o[4 * n + 2 * hr + 1] *= corr;
      }
    }

    // P as E A fragments: keys 16kk..16kk+15 are accumulator blocks 2kk and 2kk + 1.
    uint32_t pa[BN / 16][4];
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      pa[kk][0] = pack2<E>(sc[8 * kk + 0], sc[8 * kk + 1]);
      pa[kk][1] = pack2<E>(sc[8 * kk + 2], sc[8 * kk + 3]);
      pa[kk][2] = pack2<E>(sc[8 * kk + 4], sc[8 * kk + 5]);
      pa[kk][3] = pack2<E>(sc[8 * kk + 6], sc[8 * kk + 7]);
    }

    // O += P V_j: BN / 16 steps of k16, each 16 key rows (2048 bytes) further into V.
    reg_fence(o);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      const uint64_t dv = smem_desc(sV(s) + kk * 16 * 128, BN * 128, 1024);
      if constexpr (D == 128) {
        wgmma_rs_n128_tb<E>(o, pa[kk], dv);
      } else {
        wgmma_rs_n64_tb<E>(o, pa[kk], dv);
      }
    }
    wgmma_commit();
    wgmma_wait_all();
    reg_fence(o);
    __syncwarp();
    if (lane == 0) mbar_arrive(empty(s));  // this warp is done with stage s
    j = jn;
  }

  // out = O / l; lse = scale*m + ln l. Rows that saw no key: out 0, lse -inf.
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    float ls = l[hr];
    ls += __shfl_xor_sync(0xffffffffu, ls, 1);
    ls += __shfl_xor_sync(0xffffffffu, ls, 2);
    const int r = q0 + row0 + 8 * hr;
    if (r >= p.Tq) continue;
    const float inv = ls > 0.f ? 1.f / ls : 0.f;
    const int64_t obase = (static_cast<int64_t>(r) * p.H + h) * D;
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      const int col = n * 8 + 2 * t;
      const float v0 = o[4 * n + 2 * hr] * inv, v1 = o[4 * n + 2 * hr + 1] * inv;
      if (p.out_f32) {
        *reinterpret_cast<float2*>(static_cast<float*>(p.out) + obase + col) = make_float2(v0, v1);
      } else {
        *reinterpret_cast<uint32_t*>(static_cast<uint16_t*>(p.out) + obase + col) = pack2<E>(v0, v1);
      }
    }
    if (t == 0) p.lse[static_cast<int64_t>(r) * p.H + h] = ls > 0.f ? (m[hr] * sl2 + log2f(ls)) * kLn2 : -INFINITY;
  }
#else
  __trap();  // built without sm_90a features: the dispatcher never routes here
#endif
}

}  // namespace seqpar::cuda_attn::sm90
