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
//   O += P V_j    wgmma m64nDk16, A = P as bf16 registers (the S accumulator layout is the A
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

// ---- mbarriers and the tensor memory accelerator ------------------------------------------
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// Makes initialized barriers visible to the other threads and to the async proxy (TMA).
__device__ __forceinline__ void mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// Waits until the phase of parity `parity` has completed (a fresh barrier counts its phase
// "before 0", parity 1, as completed).
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}
// Box (c0, c1, c2) of a 3-D tensor map into shared memory at dst, completing bytes on bar.
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const CUtensorMap* map, uint32_t bar, int c0, int c1,
                                            int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], [%2];\n" ::
          "r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}

// ---- warpgroup MMA ------------------------------------------------------------------------
// Shared-memory matrix descriptor: start address, leading / stride byte offsets (all >> 4),
// 128-byte swizzle (mode 1 in bits 62-63); base offset 0 (tiles are 1024-byte aligned).
//   K-major operand (Q, K): rows of 128 bytes, SBO = 1024 (8-row groups); LBO unused (1).
//   MN-major operand (V): 8 key rows of 128 bytes = 64 columns; SBO = 1024 between 8-key groups,
//   LBO = distance between the 64-column halves.
__device__ __forceinline__ uint64_t smem_desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return static_cast<uint64_t>((addr & 0x3FFFFu) >> 4) | (static_cast<uint64_t>(lbo >> 4) << 16) |
         (static_cast<uint64_t>(sbo >> 4) << 32) | (1ull << 62);
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait_all() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
// Keeps the compiler from moving accumulator accesses across the asynchronous MMAs.
template <int N>
__device__ __forceinline__ void reg_fence(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// d (m64 x n128 f32) = (scale_d ? d : 0) + A B; A [64 x 16] and B [16 x 128] from shared memory, both
// K-major (descriptors a, b).
__device__ __forceinline__ void wgmma_ss_n128(float (&d)[64], uint64_t a, uint64_t b, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
      "}, "
      "%64, %65, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(a), "l"(b), "r"(scale_d));
}

// d (m64 x n128 f32) += A B; A [64 x 16] bf16 in registers (per warp the mma.m16n8k16 A layout), B
// [16 x 128] from shared memory, MN-major (transposed; descriptor b).
__device__ __forceinline__ void wgmma_rs_n128_tb(float (&d)[64], const uint32_t (&a)[4], uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
      "}, "
      "{%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
}

// d (m64 x n64 f32) += A B; A [64 x 16] bf16 in registers (per warp the mma.m16n8k16 A layout), B
// [16 x 64] from shared memory, MN-major (transposed; descriptor b).
__device__ __forceinline__ void wgmma_rs_n64_tb(float (&d)[32], const uint32_t (&a)[4], uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
      "}, "
      "{%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
}

// ---- the kernel ---------------------------------------------------------------------------
// q_stats per BM query rows, k_stats per BN keys (tile_stats of attn_launch.h).
template <int D, int NWG, int STAGES>
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
  int j = next_visible<true>(qs, k_stats, nkt, 0, p.causal, lane);

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
      j = next_visible<true>(qs, k_stats, nkt, j + 1, p.causal, lane);
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
    const int jn = next_visible<true>(qs, k_stats, nkt, j + 1, p.causal, lane);
    const int cls = tile_class(qs, k_stats[j], p.causal, (j + 1) * BN > p.Tk);
    const int s = it % STAGES;
    mbar_wait(full(s), (it / STAGES) & 1);

    // S = Q K_j^T: D / 16 steps of k16; within a 128-byte half a step moves 32 bytes.
    float sc[SR];
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const uint64_t da = smem_desc(sQw + (kk >> 2) * (BM * 128) + (kk & 3) * 32, 16, 1024);
      const uint64_t db = smem_desc(sK(s) + (kk >> 2) * (BN * 128) + (kk & 3) * 32, 16, 1024);
      wgmma_ss_n128(sc, da, db, kk > 0 ? 1 : 0);
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
            const bool vis = cok && qok[hr] && qseg[hr] == kseg && (!p.causal || kpos <= qpos[hr]);
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

    // P as bf16 A fragments: keys 16kk..16kk+15 are accumulator blocks 2kk and 2kk + 1.
    uint32_t pa[BN / 16][4];
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      pa[kk][0] = pack_bf16(sc[8 * kk + 0], sc[8 * kk + 1]);
      pa[kk][1] = pack_bf16(sc[8 * kk + 2], sc[8 * kk + 3]);
      pa[kk][2] = pack_bf16(sc[8 * kk + 4], sc[8 * kk + 5]);
      pa[kk][3] = pack_bf16(sc[8 * kk + 6], sc[8 * kk + 7]);
    }

    // O += P V_j: BN / 16 steps of k16, each 16 key rows (2048 bytes) further into V.
    reg_fence(o);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      const uint64_t dv = smem_desc(sV(s) + kk * 16 * 128, BN * 128, 1024);
      if constexpr (D == 128) {
        wgmma_rs_n128_tb(o, pa[kk], dv);
      } else {
        wgmma_rs_n64_tb(o, pa[kk], dv);
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
        *reinterpret_cast<uint32_t*>(static_cast<uint16_t*>(p.out) + obase + col) = pack_bf16(v0, v1);
      }
    }
    if (t == 0) p.lse[static_cast<int64_t>(r) * p.H + h] = ls > 0.f ? (m[hr] * sl2 + log2f(ls)) * kLn2 : -INFINITY;
  }
#else
  __trap();  // built without sm_90a features: the dispatcher never routes here
#endif
}

}  // namespace seqpar::cuda_attn::sm90
