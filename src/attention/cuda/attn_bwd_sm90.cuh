// Flash-attention backward main kernel for Hopper (sm_90a), instantiated in attn_bwd_sm90.cu. One
// CTA per (KV head, BN = 128-key tile): two consumer warpgroups of 64 keys each, plus a producer
// warpgroup (one warp works; the group gives its registers to the consumers). K and V of the tile stay in shared
// memory; the CTA walks the visible BM-query tiles (BM = 64 at D = 128, 128 at D = 64: FlashAttention-3's shapes) and,
// inside, the query heads of its GQA group (the order of the mma.sync kernel, attn_bwd.cuh), so dK and dV of its keys
// are complete in registers at the end and are stored without atomics.
//
// Producer warp: the tensor memory accelerator copies K, V once and, per step, Q_i and dO_i (3-D
//   maps over [T, heads, D], 64-column boxes, 128-byte swizzle) plus lse2_i and delta_i (1-D bulk
//   copies of BM floats) into a STAGES-deep ring; `full` / `empty` mbarriers per stage.
// Consumer warpgroup (64 keys; accumulators m64 x N over 128 threads), per step:
//   S^T  = K Q_i^T         wgmma m64nBMk16, A = K, B = Q_i, both from shared memory, K-major
//   dP^T = V dO_i^T        the same with V, dO_i
//   P^T  = exp2(S^T * scale*log2e - lse2_i), masked on boundary tiles (0)
//   dS^T = P^T (dP^T - delta_i)
//   dV  += P^T dO_i        wgmma m64nDk16, A = P^T as E registers (an accumulator's layout is
//                          the A register layout), B = dO_i MN-major (transpose bit)
//   dK  += dS^T Q_i        as dV's, A = dS^T registers, B = Q_i MN-major, issued after the dQ product
//   dS^T -> shared buffer (step % 2) (E, 128-byte swizzle), then
//   dQ  += dS K            of the previous step (its dS^T buffer: both warpgroups' halves are in by now, so
//                          neither waits for the other inside a step), wgmma m64n64k16 over the 128 keys with
//                          A = dS (MN-major from dS^T) and B = K (MN-major), staged as f32 in one of two shared
//                          tiles (128-byte swizzled boxes of 32 columns) and added by a writer warp of the
//                          producer warpgroup, D / 32 bulk tensor reductions
//                          (cp.reduce.async.bulk.tensor .add) per step; with two tiles the
//                          consumers wait for the writer only when it is a whole step behind:
//                          D = 128: warpgroup w computes dQ columns 64w..64w+63 of the 64 queries;
//                          D = 64: warpgroup w computes queries 64w..64w+63 (all 64 columns).
// At the end: dk (+)= scale * dK, dv (+)= dV (write_grads: stored; 0 where no query sees the keys).
// Shared layout of a tile of R rows (the forward's convention, the one sm90_ptx.cuh's smem_desc
// describes): for each 64-column half c, R rows of 128 bytes at c * R * 128; 16-byte chunk k of
// row r at chunk k ^ (r & 7); every tile starts at a multiple of 1024 bytes. dS^T is such a tile of
// BN key rows and BM query columns.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "attention/cuda/attn_bwd.cuh"       // detail::store_pair
#include "attention/cuda/attn_common.cuh"
#include "attention/cuda/attn_launch.h"
#include "attention/cuda/sm90_ptx.cuh"  // mbarriers, tensor copies, descriptors, wgmma

namespace seqpar::cuda_attn::sm90 {

using namespace dev;

// Queries per step: 64 at D = 128, 128 at D = 64 (the registers allow it there, and a step of 64
// queries does too little matrix work per synchronisation).
constexpr int bwd_sm90_bm_of(int D) { return D == 64 ? 128 : 64; }

template <int D, int STAGES>
struct BwdShape {
  static constexpr int BM = bwd_sm90_bm_of(D);  // queries per step
  // dQ goes through the writer warp's bulk tensor reductions from two shared tiles. Against the consumers'
  // f32 vector atomics, which it replaced, forward+backward is 3-8% faster at D = 128 (bench/NOTES.md,
  // 2026-12-07) and 15-17% at D = 64 (twenty-fourth session, 16K / 64K) on an H100. Two CTAs of a cluster adding
  // their dQ in distributed shared memory, and each warpgroup's dQ over its own keys, measured slower (0.74-0.89x
  // and 0.86-0.94x the default, D = 128: bench/NOTES.md, twenty-seventh session).
  static constexpr int BN = 128;                // keys per CTA, 64 per consumer warpgroup
  static constexpr int kConsumerWarps = 8;
  // A whole producer warpgroup (ptxas budgets registers per warpgroup anyway) that hands its
  // registers to the consumers: 128 x 24 + 256 x 240 = 64,512, exactly the block's registers at
  // launch (168 a thread: 65536 / 384 rounded down to 8). setmaxnreg moves registers within the
  // block only: a sum above the launch's waits forever.
  static constexpr int kProducerRegs = 24, kConsumerRegs = 240;
  static constexpr int kThreads = 32 * (kConsumerWarps + 4);
  static_assert(128 * kProducerRegs + 32 * kConsumerWarps * kConsumerRegs <= 65536 / kThreads / 8 * 8 * kThreads,
                "setmaxnreg needs no more registers than the block has at launch");
  static constexpr bool kSplitN = BM == 64;  // dQ: the warpgroups split its columns (else its queries)
  // Shared dQ tiles: two with a 2-stage Q / dO ring, one with a 3-stage ring (the shared memory holds one or the
  // other; attn_bwd_sm90.cu runs 2 stages: 3 stages with one dQ tile measured 3% faster at 16K and 2-3% slower at 64K,
  // H 32 / Hkv 8, and slower at H 16, D = 128: bench/NOTES.md, twenty-sixth session).
  static constexpr int kDqTiles = STAGES == 2 ? 2 : 1;
  static constexpr uint32_t kKVBytes = BN * D * 2;    // K or V
  static constexpr uint32_t kDQBytes = BM * D * 4;    // one f32 dQ tile
  static constexpr uint32_t kQBytes = BM * D * 2;     // one Q or dO tile
  static constexpr uint32_t kRowBytes = BM * 4;       // lse2 or delta of one tile
  static constexpr uint32_t kDSBytes = BN * BM * 2;   // dS^T [BN][BM] 16-bit
  static constexpr uint32_t kK = 0;
  static constexpr uint32_t kV = kKVBytes;
  static constexpr uint32_t kStage0 = 2 * kKVBytes;            // [STAGES] x {Q, dO}
  static constexpr uint32_t kDS = kStage0 + STAGES * 2 * kQBytes;  // [2] dS^T buffers
  // [kDqTiles] dQ tiles of a step, f32, each D / 32 boxes of BM rows x 128 bytes (32 columns), 16-byte
  // chunk k of row r at chunk k ^ (r & 7) (the tensor map's 128-byte swizzle: the consumers' float2
  // stores hit distinct banks), read by the writer warp's bulk tensor reductions.
  static constexpr uint32_t kDQ = kDS + 2 * kDSBytes;
  static constexpr uint32_t kStats = kDQ + kDqTiles * kDQBytes;  // [STAGES] x {lse2, delta}
  static constexpr uint32_t kBar = (kStats + STAGES * 2 * kRowBytes + 15) / 16 * 16;
  // mbarriers: full / empty per stage, K / V, then dS^T buffer b full (ds_full) and read (ds_empty), b = 0, 1.
  static constexpr uint32_t kEnd = kBar + 8 * (2 * STAGES + 1 + 4);
  // + 1024 where it fits: the dynamic shared memory base is rounded up to 1024 bytes inside the kernel. Where it
  // does not (two dQ tiles at D = 64: 40 bytes short) the base is 1024-aligned by its declaration
  // (__align__(1024), no static shared memory in the kernel); the kernel traps if it ever is not.
  static constexpr uint32_t kSlack = kEnd + 1024 <= 232448 ? 1024 : 0;
  static constexpr uint32_t kSmem = kSlack + kEnd;
  static_assert(kSmem <= 232448, "more shared memory than an sm_90 block may have (227 KB)");
};
// Named barriers of the kernel (0 is __syncthreads): warpgroup 0's first dV issued (warpgroup 1 starts then); dQ
// tile b written by the consumers (kBarDqFull + b) and read by the writer's reductions (kBarDqEmpty + 2 w + b, one
// barrier per consumer warpgroup w, so that a warpgroup waits for the writer, never for the other warpgroup).
constexpr int kBarStart = 1, kBarDqFull = 2, kBarDqEmpty = 4;

// ---- helpers the forward does not have ----------------------------------------------------
// 1-D bulk copy of `bytes` (a multiple of 16, both addresses 16-byte aligned) global -> shared,
// completing on bar.
__device__ __forceinline__ void bulk_load(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
               "l"(reinterpret_cast<uint64_t>(src)), "r"(bytes), "r"(bar)
               : "memory");
}
// global box (c0, c1, c2) of a 3-D f32 tensor map += shared[src ..) (the box, laid out as the map's
// swizzle says), asynchronously: a bulk async-group of this thread.
__device__ __forceinline__ void tma_reduce_add_3d(const CUtensorMap* map, uint32_t src, int c0, int c1, int c2) {
  asm volatile(
      "cp.reduce.async.bulk.tensor.3d.global.shared::cta.add.tile.bulk_group [%0, {%2, %3, %4}], [%1];\n" ::"l"(
          reinterpret_cast<uint64_t>(map)),
      "r"(src), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}
// Four 8x8 16-bit matrices -> shared memory, one warp: lanes 8i..8i+7 give the 16-byte row addresses of matrix i,
// and register i of lane l holds its row l / 4, columns 2 (l % 4) and 2 (l % 4) + 1 (an accumulator fragment's
// layout): PTX ISA 7.8, sm_90.
__device__ __forceinline__ void stmatrix_x4(uint32_t addr, const uint32_t (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r[0]), "r"(r[1]),
               "r"(r[2]), "r"(r[3])
               : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// Until all but this thread's N newest bulk groups have read their shared memory.
template <int N>
__device__ __forceinline__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}
// Until this thread's bulk groups are complete.
__device__ __forceinline__ void bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }
// Makes this thread's generic-proxy shared-memory stores visible to the async proxy (wgmma).
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// An m64 x nN f32 accumulator (N / 2 registers) as N / 16 k16 E A fragments: columns 16kk..16kk+15
// are accumulator blocks 2kk and 2kk + 1 (register 4n + 2hr + e: row 16w + g + 8hr, column 8n + 2t + e).
template <Elem E, int N>
__device__ __forceinline__ void acc_to_a(uint32_t (&a)[N / 16][4], const float (&c)[N / 2]) {
#pragma unroll
  for (int kk = 0; kk < N / 16; ++kk)
#pragma unroll
    for (int j = 0; j < 4; ++j) a[kk][j] = pack2<E>(c[8 * kk + 2 * j], c[8 * kk + 2 * j + 1]);
}

// d += A B with A [64 x 16] E registers, B [16 x D] MN-major from shared memory.
template <Elem E, int D>
__device__ __forceinline__ void wgmma_rs_tb(float (&d)[D / 2], const uint32_t (&a)[4], uint64_t b) {
  if constexpr (D == 128) {
    wgmma_rs_n128_tb<E>(d, a, b);
  } else {
    wgmma_rs_n64_tb<E>(d, a, b);
  }
}

// ---- the kernel ---------------------------------------------------------------------------
// q_stats per BM query rows, k_stats per BN keys (tile_stats of attn_launch.h). lse2 / delta rows
// are (h, Tq_pad) with Tq_pad = ceil(Tq / BM) * BM.
template <Elem E, int D, int STAGES>
__global__ void __launch_bounds__(BwdShape<D, STAGES>::kThreads, 1)
    bwd_sm90_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_do,
                    const __grid_constant__ CUtensorMap tm_k, const __grid_constant__ CUtensorMap tm_v,
                    const __grid_constant__ CUtensorMap tm_dq, const BwdParams p, const int4* __restrict__ q_stats,
                    const int4* __restrict__ k_stats, const int32_t* __restrict__ q_runs) {
#if !defined(__CUDA_ARCH__) || defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using S = BwdShape<D, STAGES>;
  constexpr int BM = S::BM, BN = S::BN, NCW = S::kConsumerWarps;
  constexpr int HALVES = D / 64;  // 128-byte column halves of a row
  constexpr int OR = D / 2;       // dK / dV accumulator registers per thread
  constexpr int SR = BM / 2;      // S^T / dP^T accumulator registers per thread (m64 x BM)
  static_assert(D == 64 || D == 128, "head dim 64 or 128");

  extern __shared__ __align__(1024) uint8_t smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  if constexpr (S::kSlack == 0) {
    if (base != raw) __trap();  // no room to align (BwdShape::kSlack)
  }
  const uint8_t* base_ptr = smem_raw + (base - raw);
  const uint32_t sK = base + S::kK, sV = base + S::kV;
  auto sQ = [&](int s) { return base + S::kStage0 + 2u * s * S::kQBytes; };
  auto sdO = [&](int s) { return base + S::kStage0 + (2u * s + 1u) * S::kQBytes; };
  auto sdS = [&](int b) { return base + S::kDS + b * S::kDSBytes; };
  auto stats_off = [&](int s) { return S::kStats + 2u * s * S::kRowBytes; };  // lse2, then delta
  const uint32_t bars = base + S::kBar;
  auto full = [&](int s) { return bars + 8u * s; };
  auto empty = [&](int s) { return bars + 8u * (STAGES + s); };
  const uint32_t kvbar = bars + 8u * 2 * STAGES;
  auto ds_full = [&](int b) { return kvbar + 8u * (1 + b); };
  auto ds_empty = [&](int b) { return kvbar + 8u * (3 + b); };

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  // The grid is (key tile, KV head). Blocks start in x-fastest order, so the blocks running at once are the key tiles
  // of one KV group (at 16K all 128 of them and a few of the next group's), heaviest first, and they share that
  // group's Q / dO / dQ rows in L2. The grid (KV head, key tile), whose running blocks were key tiles 0..16 of all
  // eight groups, was 10% slower at 16K, H 32, D 128 (bench/NOTES.md, twenty-ninth session).
  const int hk = blockIdx.y, kt = blockIdx.x;
  const int G = p.H / p.Hkv;
  const int k0 = kt * BN;
  const int nqt = (p.Tq + BM - 1) / BM;
  const int Tq_pad = nqt * BM;
  const int4 ks = k_stats[kt];
  const bool k_ragged = k0 + BN > p.Tk;

  if (tid == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(full(s), 1);
      mbar_init(empty(s), NCW);
    }
    mbar_init(kvbar, 1);
    for (int b = 0; b < 2; ++b) {
      mbar_init(ds_full(b), NCW);
      mbar_init(ds_empty(b), NCW);
    }
    mbar_init_fence();
  }
  __syncthreads();  // the last CTA-wide barrier: the producer warp leaves early

  // Producer, writer and consumers walk the same sequence of (visible query tile, head of the group). (Walking the
  // query tiles from the last down, so that the blocks running at once read the same Q / dO tiles at about the same
  // time, measured no faster on an H100: bench/NOTES.md, twenty-fifth session.)
  VisibleTiles<false> vis{ks, q_stats, nqt, p.causal, p.window, lane};
  auto next_i = [&](int from) { return vis.next(from); };
  int i = next_i(0);
  const bool any = i < nqt;
  // The step after (query tile qi, head gi of the group) (warp-uniform: every lane calls it). From 4 query heads per
  // KV head every query tile of one head is walked before the next head, so that the blocks running at once read one
  // head's rows; below that the heads of the group inside each query tile. (On an H100, forward+backward: H 12 / Hkv 2
  // 6.00 -> 4.98 ms at 16K and 86-87 -> 82 ms at 64K, H 32 / Hkv 8 up to 9% at 16K and 1% at 64K; at 2 heads per KV
  // head it was up to 2% slower: bench/NOTES.md, twenty-ninth and thirty-sixth sessions.)
  const int i_first = i;
  const bool head_outer = G >= 4;
  auto advance = [&](int& qi, int& gi) {
    if (head_outer) {
      qi = next_i(qi + 1);
      if (qi >= nqt && ++gi < G) qi = i_first;
    } else if (++gi == G) {
      gi = 0;
      qi = next_i(qi + 1);
    }
  };

  if (warp >= NCW) {  // ---- producer warpgroup: its first warp issues the copies
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(S::kProducerRegs));
    if (warp == NCW + 1) {  // ---- the dQ writer: per step, dq_acc rows += the shared dQ tile
      int gi = 0;
      for (int it = 0; i < nqt; ++it) {
        constexpr int NT = S::kDqTiles;
        const int h = hk * G + gi, b = it % NT;
        named_bar_sync(kBarDqFull + b, NCW * 32 + 32);  // the consumers' dQ is in tile b
        if (lane == 0) {
#pragma unroll
          for (int c = 0; c < D / 32; ++c)
            tma_reduce_add_3d(&tm_dq, base + S::kDQ + b * S::kDQBytes + c * BM * 128, c * 32, h, i * BM);
          bulk_commit();
          bulk_wait_read<NT - 1>();  // step it - NT + 1's tile has been read
        }
        __syncwarp();
        advance(i, gi);
        // The consumers write that tile again in the next step (when there is one).
        if (it >= NT - 1 && i < nqt) {
          named_bar_arrive(kBarDqEmpty + (it - NT + 1) % NT, NCW * 16 + 32);
          named_bar_arrive(kBarDqEmpty + 2 + (it - NT + 1) % NT, NCW * 16 + 32);
        }
      }
      if (lane == 0) bulk_wait_all();
      return;
    }
    if (warp != NCW) return;
    if (lane == 0 && any) {
      mbar_arrive_expect_tx(kvbar, 2 * S::kKVBytes);
#pragma unroll
      for (int c = 0; c < HALVES; ++c) {
        tma_load_3d(sK + c * BN * 128, &tm_k, kvbar, c * 64, hk, k0);
        tma_load_3d(sV + c * BN * 128, &tm_v, kvbar, c * 64, hk, k0);
      }
    }
    int gi = 0;
    for (int it = 0; i < nqt; ++it) {
      const int s = it % STAGES;
      const int h = hk * G + gi;
      if (lane == 0) {
        mbar_wait(empty(s), ((it / STAGES) & 1) ^ 1);  // the consumers are done with its last use
        mbar_arrive_expect_tx(full(s), 2 * S::kQBytes + 2 * S::kRowBytes);
#pragma unroll
        for (int c = 0; c < HALVES; ++c) {
          tma_load_3d(sQ(s) + c * BM * 128, &tm_q, full(s), c * 64, h, i * BM);
          tma_load_3d(sdO(s) + c * BM * 128, &tm_do, full(s), c * 64, h, i * BM);
        }
        const int64_t off = static_cast<int64_t>(h) * Tq_pad + static_cast<int64_t>(i) * BM;
        bulk_load(base + stats_off(s), p.lse2 + off, S::kRowBytes, full(s));
        bulk_load(base + stats_off(s) + S::kRowBytes, p.delta + off, S::kRowBytes, full(s));
      }
      __syncwarp();
      advance(i, gi);
    }
    return;
  }

  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(S::kConsumerRegs));

  // ---- consumer warpgroups. Accumulator layout (m64 x N f32): warp w of the warpgroup holds
  // rows 16w + g and 16w + g + 8 (g = lane / 4, t = lane % 4); register 4n + 2hr + e is row
  // 16w + g + 8hr, column 8n + 2t + e. S^T / dP^T / dS^T / dK / dV rows are keys, dQ rows queries.
  const int wg = __shfl_sync(0xffffffffu, warp >> 2, 0), w = warp & 3;  // (wg warp-uniform to the compiler)
  const int g = lane >> 2, t = lane & 3;
  const float sl2 = p.scale * kLog2e;
  const uint32_t sKw = sK + wg * 64 * 128, sVw = sV + wg * 64 * 128;  // this warpgroup's 64 keys
  // Descriptors of the operands that stay put (sm90_ptx.cuh's desc_add moves them per k16 step): this warpgroup's
  // K and V rows (K-major), and for dQ: dS^T (of dS buffer 0) and K, both MN-major, at this warpgroup's half.
  const uint64_t kw_desc = smem_desc(sKw, 16, 1024), vw_desc = smem_desc(sVw, 16, 1024);
  const uint64_t ds_desc = smem_desc(sdS(0) + (S::kSplitN ? 0u : wg * (BN * 128u)), BN * 128, 1024);
  const uint64_t kdq_desc = smem_desc(sK + (S::kSplitN ? wg * (BN * 128u) : 0u), BN * 128, 1024);

  // This thread's keys k0 + wg*64 + 16w + g + 8hr: their mask metadata, for boundary tiles.
  int kseg[2], kpos[2];
  bool kok[2];
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int c = k0 + wg * 64 + 16 * w + g + 8 * hr;
    kok[hr] = c < p.Tk;
    kseg[hr] = kok[hr] ? p.k_seg[c] : 0;
    kpos[hr] = kok[hr] ? p.k_pos[c] : 0;
  }

  float dk[OR], dv[OR];
#pragma unroll
  for (int r = 0; r < OR; ++r) {
    dk[r] = 0.f;
    dv[r] = 0.f;
  }

  // The dQ product of step it is issued in step it + 1, so that the warpgroups never wait for each other's dS^T of the
  // step they are in: dS^T buffer b's mbarriers ds_full (both warpgroups' dS^T written) and ds_empty (both warpgroups'
  // dQ products have read it) replace the named barrier both met at every step, whose cost was that both ran their
  // elementwise part at once with no product queued. Forward+backward 2-4% faster at D = 128 (H 16 / 32 over Hkv 8),
  // 2-6% at D = 64 (H 32); training steps 2.1% faster for Llama-3.2-1B at 64K (H100, bench/NOTES.md, thirty-fifth
  // session). A model of this synchronisation (the stage ring, both dS^T buffers' mbarriers, the dQ tiles' barriers
  // with the writer, the start barrier) over random interleavings, with three mutations it must catch:
  // bench/gpu_calls/2026-12-07_s35_bwd_lag_sync_sim.py.
  //
  // dQ_j (+)= dS K over the 128 keys (k16 steps of 16 keys = 2048 bytes of dS^T and of K), from dS^T buffer b. A = dS
  // from the dS^T tile (MN-major: 64 queries = one 128-byte row per key, the query halves BN*128 bytes apart; D = 64:
  // this warpgroup's queries), B = K (MN-major: columns in 64-wide halves BN*128 bytes apart; D = 128: this
  // warpgroup's columns).
  // (The accumulators are each caller's own array, declared where it is used, so that the compiler keeps none of
  // them live across steps.)
  auto issue_dq = [&](float(&dq)[32], int b) {
    const uint64_t dsb_desc = desc_add(ds_desc, sdS(b) - sdS(0));
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      const uint64_t a = desc_add(dsb_desc, kk * 16 * 128);
      const uint64_t bk = desc_add(kdq_desc, kk * 16 * 128);
      wgmma_ss<E, 64, 1, 1>(dq, a, bk, kk > 0 ? 1 : 0);
    }
    wgmma_commit();
  };
  // dQ of step j -> shared tile j % kDqTiles (once the writer has read it, kDqTiles steps ago), for the writer warp, as
  // stmatrix.x4 of f32 pairs (an f32 is two 16-bit halves): dq[4n + 2hr + e] is row 16w + g + 8hr (of the
  // warpgroup's 64 queries when they split the queries) of matrix 2hr + e, whose 16-byte rows hold columns col0 + 8n +
  // 2t + e, t = 0..3: the tile (and dq_acc, whose columns it adds to) holds each 8 columns in the order 2t + e at 4e +
  // t (launch_dq_finish's lane_order puts them back). Lane l gives row l % 8 of matrix l / 8, 128-byte swizzled.
  auto store_dq = [&](const float(&dq)[32], int j) {
    const int dqb = j % S::kDqTiles;
    if (j >= S::kDqTiles) named_bar_sync(kBarDqEmpty + 2 * wg + dqb, NCW * 16 + 32);
    const int mi = lane >> 3, mr = lane & 7;
    const int row = (S::kSplitN ? 0 : wg * 64) + 16 * w + 8 * (mi >> 1) + mr;
    const uint32_t rbase = base + S::kDQ + dqb * S::kDQBytes + row * 128;
#pragma unroll
    for (int n = 0; n < 8; ++n) {
      const int col = (S::kSplitN ? wg * 64 : 0) + 8 * n + 4 * (mi & 1);  // this lane's 16-byte row: 4 columns
      const uint32_t r4[4] = {__float_as_uint(dq[4 * n]), __float_as_uint(dq[4 * n + 1]),
                              __float_as_uint(dq[4 * n + 2]), __float_as_uint(dq[4 * n + 3])};
      stmatrix_x4(rbase + (col >> 5) * (BM * 128) + ((((col & 31) >> 2) ^ mr) << 4), r4);
    }
    fence_proxy_async();  // visible to the bulk reductions
    named_bar_arrive(kBarDqFull + dqb, NCW * 32 + 32);
  };

  if (any) mbar_wait(kvbar, 0);
  // Warpgroup 1 starts when warpgroup 0 has issued its first dV: half a step apart, so that one's elementwise part
  // runs under the other's products from the start (level to 1% faster than a common start, same call).
  if (any && wg == 1) named_bar_sync(kBarStart, NCW * 32);
  int gi = 0, it = 0;
  for (; i < nqt; ++it) {
    const int s = it % STAGES, buf = it & 1;
    const int4 qst = q_stats[i];
    const int cls = tile_class(qst, ks, p.causal, p.window, k_ragged || (i + 1) * BM > p.Tq);
    mbar_wait(full(s), (it / STAGES) & 1);

    // S^T = K Q_i^T and dP^T = V dO_i^T: D / 16 steps of k16; within a 128-byte half a step moves
    // 32 bytes.
    float st[SR], dpt[SR];
    const uint64_t q_desc = smem_desc(sQ(s), 16, 1024), do_desc = smem_desc(sdO(s), 16, 1024);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const uint32_t col = (kk & 3) * 32;
      const uint64_t da = desc_add(kw_desc, (kk >> 2) * (BN * 128) + col);
      const uint64_t db = desc_add(q_desc, (kk >> 2) * (BM * 128) + col);
      wgmma_ss<E, BM>(st, da, db, kk > 0 ? 1 : 0);
    }
    wgmma_commit();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const uint32_t col = (kk & 3) * 32;
      const uint64_t da = desc_add(vw_desc, (kk >> 2) * (BN * 128) + col);
      const uint64_t db = desc_add(do_desc, (kk >> 2) * (BM * 128) + col);
      wgmma_ss<E, BM>(dpt, da, db, kk > 0 ? 1 : 0);
    }
    wgmma_commit();
    wgmma_wait<1>();  // S^T is in (dP^T may still run)
    reg_fence(st);

    // P^T = exp2(S^T * scale*log2e - lse2) per query column; masked entries 0. Padded query rows
    // (>= Tq) have lse2 = +inf, rows that see nothing too: P = 0.
    // lse2 / delta are in the lanes' order (launch_bwd_prep's lane_order): this lane's columns 16m + 8n + 2t + e
    // (n, e < 2) are the float4 at 16m + 4t.
    const float* L = reinterpret_cast<const float*>(base_ptr + stats_off(s));
    const float* Dl = L + BM;
#pragma unroll
    for (int m = 0; m < BM / 16; ++m) {
      const float4 lq = *reinterpret_cast<const float4*>(L + 16 * m + 4 * t);
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        st[8 * m + 2 * hr] = fast_exp2(fmaf(st[8 * m + 2 * hr], sl2, -lq.x));
        st[8 * m + 2 * hr + 1] = fast_exp2(fmaf(st[8 * m + 2 * hr + 1], sl2, -lq.y));
        st[8 * m + 4 + 2 * hr] = fast_exp2(fmaf(st[8 * m + 4 + 2 * hr], sl2, -lq.z));
        st[8 * m + 4 + 2 * hr + 1] = fast_exp2(fmaf(st[8 * m + 4 + 2 * hr + 1], sl2, -lq.w));
      }
    }
    if (cls == kPartial) {
      // A query tile that is one run (one segment, positions qst.z + offset) needs no loads for its metadata.
      const bool q_run = q_runs[i] != 0;
#pragma unroll
      for (int n = 0; n < BM / 8; ++n)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int qr = i * BM + 8 * n + 2 * t + e;
          const bool qok = qr < p.Tq;
          const int qseg = !qok ? 0 : q_run ? qst.x : p.q_seg[qr];
          const int qpos = !qok ? 0 : q_run ? qst.z + 8 * n + 2 * t + e : p.q_pos[qr];
#pragma unroll
          for (int hr = 0; hr < 2; ++hr) {
            const bool vis = qok && kok[hr] && elem_visible(qseg, qpos, kseg[hr], kpos[hr], p.causal, p.window);
            if (!vis) st[4 * n + 2 * hr + e] = 0.f;
          }
        }
    }

    wgmma_wait<0>();  // dP^T is in
    reg_fence(dpt);
    // dS^T = P^T (dP^T - delta)
#pragma unroll
    for (int m = 0; m < BM / 16; ++m) {
      const float4 dl = *reinterpret_cast<const float4*>(Dl + 16 * m + 4 * t);
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        dpt[8 * m + 2 * hr] = st[8 * m + 2 * hr] * (dpt[8 * m + 2 * hr] - dl.x);
        dpt[8 * m + 2 * hr + 1] = st[8 * m + 2 * hr + 1] * (dpt[8 * m + 2 * hr + 1] - dl.y);
        dpt[8 * m + 4 + 2 * hr] = st[8 * m + 4 + 2 * hr] * (dpt[8 * m + 4 + 2 * hr] - dl.z);
        dpt[8 * m + 4 + 2 * hr + 1] = st[8 * m + 4 + 2 * hr + 1] * (dpt[8 * m + 4 + 2 * hr + 1] - dl.w);
      }
    }
    uint32_t pa[BM / 16][4], da[BM / 16][4];
    acc_to_a<E, BM>(pa, st);
    acc_to_a<E, BM>(da, dpt);

    // dV += P^T dO_i: BM / 16 steps of k16 over the queries, each 16 query rows (2048 bytes) further.
    reg_fence(dv);
    const uint64_t do_mn_desc = smem_desc(sdO(s), BM * 128, 1024);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BM / 16; ++kk) wgmma_rs_tb<E, D>(dv, pa[kk], desc_add(do_mn_desc, kk * 16 * 128));
    wgmma_commit();

    if (it == 0 && wg == 0) named_bar_arrive(kBarStart, NCW * 32);
    // dS^T buffer buf was last read by step it - 2's dQ products (both warpgroups').
    if (it >= 2) mbar_wait(ds_empty(buf), ((it - 2) >> 1) & 1);
    // dS^T (E) -> shared buffer buf, one stmatrix.x4 per 16 queries: da[kk][j] is the 8 x 8 matrix of key rows
    // wg*64 + 16w + 8(j & 1) + 0..7 and query chunk n = 2kk + (j >> 1) (8 queries: 64-query half n / 8, 16-byte chunk
    // n % 8 of its 128-byte row, swizzle key = the row's low 3 bits). Lane l gives row l % 8 of matrix l / 8.
    {
      const int mi = lane >> 3, mr = lane & 7;
      const uint32_t row = sdS(buf) + (wg * 64 + 16 * w + 8 * (mi & 1) + mr) * 128;
#pragma unroll
      for (int kk = 0; kk < BM / 16; ++kk) {
        const int n = 2 * kk + (mi >> 1);
        stmatrix_x4(row + (n >> 3) * (BN * 128) + (((n & 7) ^ mr) << 4), da[kk]);
      }
    }
    fence_proxy_async();  // this thread's dS^T stores are visible to the wgmma
    __syncwarp();
    if (lane == 0) mbar_arrive(ds_full(buf));
    // The previous step's dQ, whose dS^T (both warpgroups') is long in: no warpgroup waits for the other's
    // dS^T of this step, so one's elementwise part can run under the other's products. In the first step the
    // product runs all the same (on buffer 1's leftovers) and is dropped: no branch around the products, which
    // ptxas would answer by serializing them.
    if (it > 0) mbar_wait(ds_full(buf ^ 1), ((it - 1) >> 1) & 1);  // both warpgroups' dS^T of step it - 1
    float dq[32];
    issue_dq(dq, buf ^ 1);
    // dK += dS^T Q_i, as dV's with A = dS^T registers, B = Q_i MN-major.
    reg_fence(dk);
    const uint64_t q_mn_desc = smem_desc(sQ(s), BM * 128, 1024);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BM / 16; ++kk) wgmma_rs_tb<E, D>(dk, da[kk], desc_add(q_mn_desc, kk * 16 * 128));
    wgmma_commit();
    wgmma_wait<1>();  // dV and the previous dQ are in; dK still runs
    reg_fence(dv);
    reg_fence(dq);
    if (it > 0) {
      __syncwarp();
      if (lane == 0) mbar_arrive(ds_empty(buf ^ 1));  // this warp's dQ product has read buffer buf ^ 1
      store_dq(dq, it - 1);
    }
    wgmma_wait<0>();  // dK (and dV) are in
    reg_fence(dk);
    reg_fence(dv);
    // Stage s (Q_i, dO_i, lse2, delta) is free once dV and dK are in; the producer's copy of step it + STAGES starts.
    __syncwarp();
    if (lane == 0) mbar_arrive(empty(s));  // this warp is done with stage s

    advance(i, gi);
  }
  if (it > 0) {  // the last step's dQ
    const int j = it - 1;
    mbar_wait(ds_full(j & 1), (j >> 1) & 1);
    float dq[32];
    issue_dq(dq, j & 1);
    wgmma_wait<0>();
    reg_fence(dq);
    store_dq(dq, j);
  }
  // No query sees these keys: nothing to add; when writing, their dk/dv (0) are stored all the same.
  if (!any && !p.write_grads) return;

  // dk (+)= scale * dK, dv (+)= dV for this CTA's keys (exclusive: no atomics).
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int c = k0 + wg * 64 + 16 * w + g + 8 * hr;
    if (c >= p.Tk) continue;
    const int64_t row = (static_cast<int64_t>(c) * p.Hkv + hk) * D;
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      const int col = n * 8 + 2 * t;
      detail::store_pair<E>(p.dk, p.grad_f32, p.write_grads, row + col, p.scale * dk[4 * n + 2 * hr],
                            p.scale * dk[4 * n + 2 * hr + 1]);
      detail::store_pair<E>(p.dv, p.grad_f32, p.write_grads, row + col, dv[4 * n + 2 * hr], dv[4 * n + 2 * hr + 1]);
    }
  }
#else
  __trap();  // built without sm_90a features: the dispatcher never routes here
#endif
}

}  // namespace seqpar::cuda_attn::sm90
