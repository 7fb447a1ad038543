// Flash-attention forward kernel for Hopper (sm_90a), instantiated in attn_fwd_sm90.cu. One CTA per
// (BM-row query tile, query head): NWG consumer warpgroups of 64 query rows each, plus a producer
// warpgroup (it gives its registers to the consumers; one warp works) that streams the visible
// BN-key tiles of the KV head into STAGES-deep shared-memory rings, one for K and one for V.
//
// Producer: the tensor memory accelerator (cp.async.bulk.tensor, 3-D maps over [T, heads, D]) copies
//   Q once, then K_0, and per tile K_{j+1} before V_j (K is needed first); every slot has a `full`
//   mbarrier (transaction bytes) and an `empty` one (one arrival per consumer warp). K and V have
//   rings of their own because a K slot is free once S = Q K^T is done and a V slot only once the
//   next tile's O += P V is.
// Consumer warpgroup (64 query rows), FlashAttention-3's schedule:
//   per key tile j: issue S_j = Q K_j^T (wgmma m64n128k16, A and B from shared memory, K-major),
//   then O += P_{j-1} V_{j-1} (wgmma m64nDk16, A = P as E registers, B = V MN-major), and while the
//   tensor cores run them, the online softmax of S_j (exp2, scale folded; boundary tiles masked)
//   overlaps the P V product (intra-warpgroup overlap). O is rescaled by the softmax's correction
//   just before the next P V is issued. With two consumer warpgroups (PINGPONG) they take turns
//   to issue their products (named barriers), so one warpgroup's softmax runs under the other's
//   matrix products.
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
  // Keys per tile. (cuDNN's D = 64 shape, two warpgroups taking turns over 256-key tiles with S as one m64n256
  // product, and 3-slot rings at D = 128 measured 3% slower and level: bench/NOTES.md, twenty-eighth session.)
  static constexpr int BN = 128;
  static constexpr int kConsumerWarps = 4 * NWG;
  // The producer is a whole warpgroup (ptxas budgets registers per warpgroup: 65536 / (128 (NWG + 1))
  // each, rounded down to 8) that hands most of its registers to the consumers (setmaxnreg moves
  // registers within the block only: the sum may not exceed the block's at launch, or it waits
  // forever). Its first warp issues the copies.
  static constexpr int kProducerRegs = 24, kConsumerRegs = NWG == 2 ? 240 : 160;
  static constexpr int kThreads = 32 * (kConsumerWarps + 4);
  static_assert(128 * kProducerRegs + 32 * kConsumerWarps * kConsumerRegs <= 65536 / kThreads / 8 * 8 * kThreads,
                "setmaxnreg needs no more registers than the block has at launch");
  // Two consumer warpgroups take turns to issue their matrix products
  // (FlashAttention-3's ping-pong); three run free. (Measured on an H100, 2026-12-06: at D = 128
  // without the turns 1.02x at 16K, equal at 64K; at D = 64 with them equal. The launched pair is
  // the one the GPU tests cover.)
  static constexpr bool kPingPong = NWG == 2;
  static constexpr uint32_t kQBytes = BM * D * 2;
  static constexpr uint32_t kKVBytes = BN * D * 2;  // one K or one V tile
  static constexpr uint32_t kK = kQBytes;                       // [STAGES] K tiles
  static constexpr uint32_t kV = kQBytes + STAGES * kKVBytes;   // [STAGES] V tiles
  static constexpr uint32_t kBarOffset = kQBytes + 2 * STAGES * kKVBytes;
  // Barriers: full K, empty K, full V, empty V (STAGES each), then Q's.
  static constexpr uint32_t kSmem = 1024 + kBarOffset + 8 * (4 * STAGES + 1);
  // + 1024: the dynamic shared memory base is rounded up to 1024 bytes inside the kernel.
  static_assert(kSmem <= 232448, "more shared memory than an sm_90 block may have (227 KB)");
};

// ---- the kernel ---------------------------------------------------------------------------
// q_stats per BM query rows, k_stats per BN keys (tile_stats of attn_launch.h).
// With Shape::kPingPong the consumer warpgroups take turns to issue (warpgroup w waits on named
// barrier 1 + w and hands the turn to w + 1 mod NWG).
template <Elem E, int D, int NWG, int STAGES>
__global__ void __launch_bounds__(Shape<D, NWG, STAGES>::kThreads, 1)
    fwd_sm90_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                    const __grid_constant__ CUtensorMap tm_v, const FwdParams p, const int4* __restrict__ q_stats,
                    const int4* __restrict__ k_stats, const int32_t* __restrict__ k_runs) {
#if !defined(__CUDA_ARCH__) || defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using S = Shape<D, NWG, STAGES>;
  constexpr bool PP = S::kPingPong;
  constexpr int BM = S::BM, BN = S::BN, NCW = S::kConsumerWarps;
  constexpr int HALVES = D / 64;  // 128-byte column halves of a row
  constexpr int SR = BN / 2;      // S accumulator registers per thread (m64 x BN over 128 threads)
  constexpr int OR = D / 2;       // O accumulator registers per thread
  static_assert(D == 64 || D == 128, "head dim 64 or 128");

  extern __shared__ uint8_t smem_raw[];
  const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u;
  const uint32_t sQ = base;
  const uint32_t bars = base + S::kBarOffset;
  auto sK = [&](int s) { return base + S::kK + s * S::kKVBytes; };
  auto sV = [&](int s) { return base + S::kV + s * S::kKVBytes; };
  auto full_k = [&](int s) { return bars + 8u * s; };
  auto empty_k = [&](int s) { return bars + 8u * (STAGES + s); };
  auto full_v = [&](int s) { return bars + 8u * (2 * STAGES + s); };
  auto empty_v = [&](int s) { return bars + 8u * (3 * STAGES + s); };
  const uint32_t qbar = bars + 8u * 4 * STAGES;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int qt = gridDim.x - 1 - blockIdx.x;  // heaviest causal tiles first
  const int h = blockIdx.y, hk = h / (p.H / p.Hkv);
  const int q0 = qt * BM;
  const int nkt = (p.Tk + BN - 1) / BN;
  const int4 qs = q_stats[qt];

  if (tid == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(full_k(s), 1);
      mbar_init(empty_k(s), NCW);
      mbar_init(full_v(s), 1);
      mbar_init(empty_v(s), NCW);
    }
    mbar_init(qbar, 1);
    mbar_init_fence();
  }
  __syncthreads();  // the last CTA-wide barrier: the producer warpgroup leaves early

  // Producer and consumers walk the same sequence of visible key tiles.
  VisibleTiles<true> vis{qs, k_stats, nkt, p.causal, p.window, lane};
  int j = vis.next(0);

  if (warp >= NCW) {  // ---- producer warp (the first of the producer warpgroup)
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(S::kProducerRegs));
    if (warp != NCW) return;
    // Slot use `it` of a ring: slot it % STAGES, its (it / STAGES)-th use; the consumers freed the
    // slot's previous use when its empty barrier completed the phase of parity ((it / STAGES) & 1) ^ 1.
    auto load_k = [&](int it, int jj) {
      const int s = it % STAGES;
      mbar_wait(empty_k(s), ((it / STAGES) & 1) ^ 1);
      mbar_arrive_expect_tx(full_k(s), S::kKVBytes);
#pragma unroll
      for (int c = 0; c < HALVES; ++c) tma_load_3d(sK(s) + c * BN * 128, &tm_k, full_k(s), c * 64, hk, jj * BN);
    };
    auto load_v = [&](int it, int jj) {
      const int s = it % STAGES;
      mbar_wait(empty_v(s), ((it / STAGES) & 1) ^ 1);
      mbar_arrive_expect_tx(full_v(s), S::kKVBytes);
#pragma unroll
      for (int c = 0; c < HALVES; ++c) tma_load_3d(sV(s) + c * BN * 128, &tm_v, full_v(s), c * 64, hk, jj * BN);
    };
    if (lane == 0 && j < nkt) {
      mbar_arrive_expect_tx(qbar, S::kQBytes);
#pragma unroll
      for (int c = 0; c < HALVES; ++c) tma_load_3d(sQ + c * BM * 128, &tm_q, qbar, c * 64, h, q0);
      load_k(0, j);
    }
    for (int it = 0; j < nkt; ++it) {
      const int jn = vis.next(j + 1);
      if (lane == 0) {
        if (jn < nkt) load_k(it + 1, jn);
        load_v(it, j);
      }
      __syncwarp();
      j = jn;
    }
    return;
  }

  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(S::kConsumerRegs));

  // ---- consumer warpgroups. Accumulator layout (m64nN f32): warp w of the warpgroup holds rows
  // 16w + g and 16w + g + 8 (g = lane / 4, t = lane % 4); register 4n + 2hr + e is row
  // 16w + g + 8hr, column 8n + 2t + e.
  const int wg = __shfl_sync(0xffffffffu, warp >> 2, 0);  // (warp-uniform to the compiler: Q's descriptors uniform)
  const int g = lane >> 2, t = lane & 3;
  const int row0 = wg * 64 + (warp & 3) * 16 + g;  // this thread's first row in the tile (+8: second)
  const float sl2 = p.scale * kLog2e;
  const uint32_t sQw = sQ + wg * 64 * 128;  // this warpgroup's 64 rows of Q
  const uint64_t q_desc = smem_desc(sQw, 16, 1024);

  float o[OR];
#pragma unroll
  for (int i = 0; i < OR; ++i) o[i] = 0.f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f}, corr[2] = {1.f, 1.f};
  float sc[SR];            // S of the tile in flight, then its probabilities (f32)
  uint32_t pa[BN / 16][4];  // P of the previous tile as E A fragments (keys 16kk.. = blocks 2kk, 2kk + 1)

  // Ping-pong: this warpgroup waits for its turn before issuing and then hands the turn on. The
  // last warpgroup opens the first turn, and skips its hand-over after its last tile so that every
  // barrier is synced as often as it is arrived at.
  auto turn_wait = [&]() {
    if constexpr (PP) named_bar_sync(1 + wg, 256);
  };
  auto turn_pass = [&](bool last) {
    if constexpr (PP) {
      if (!(last && wg == NWG - 1)) named_bar_arrive(1 + (wg + 1) % NWG, 256);
    }
  };
  auto issue_qk = [&](int s) {
    const uint64_t k_desc = smem_desc(sK(s), 16, 1024);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const uint64_t da = desc_add(q_desc, (kk >> 2) * (BM * 128) + (kk & 3) * 32);
      const uint64_t db = desc_add(k_desc, (kk >> 2) * (BN * 128) + (kk & 3) * 32);
      wgmma_ss<E, BN>(sc, da, db, kk > 0 ? 1 : 0);
    }
    wgmma_commit();
  };
  // O *= corr (the last softmax's correction), then O += P V_s: BN / 16 steps of k16, each 16 key
  // rows (2048 bytes) further into V. (Rescaling before the warpgroup waits for its turn, out of the other's wait,
  // measured 1-2% slower at D = 128: bench/NOTES.md, twenty-eighth session.)
  auto issue_pv = [&](int s) {
    // (only when a row of the warp has a correction; the warp's lanes agree, so no lane diverges)
    if (__any_sync(0xffffffffu, corr[0] != 1.f || corr[1] != 1.f)) {
#pragma unroll
      for (int hr = 0; hr < 2; ++hr)
#pragma unroll
        for (int n = 0; n < D / 8; ++n) {
          o[4 * n + 2 * hr] *= corr[hr];
          o[4 * n + 2 * hr + 1] *= corr[hr];
        }
    }
    const uint64_t v_desc = smem_desc(sV(s), BN * 128, 1024);
    reg_fence(o);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      const uint64_t dv = desc_add(v_desc, kk * 16 * 128);
      if constexpr (D == 128) {
        wgmma_rs_n128_tb<E>(o, pa[kk], dv);
      } else {
        wgmma_rs_n64_tb<E>(o, pa[kk], dv);
      }
    }
    wgmma_commit();
  };
  // Masks the boundary tile jj element-wise (out-of-range keys and rows too), then the online
  // softmax of sc: m, l and corr updated, sc := exp2(S * scale*log2e - m * scale*log2e). A row whose
  // keys are all masked so far keeps m = -inf, l = 0 (and O = 0).
  auto softmax = [&](int jj) {
    const int4 ks = k_stats[jj];
    const int cls = tile_class(qs, ks, p.causal, p.window, (jj + 1) * BN > p.Tk);
    if (cls == kPartial && k_runs[jj]) {
      // The key tile is one run (one segment, positions ks.z + offset o): a row sees the keys of its segment whose
      // offsets lie in [lo, hi] (causal: kpos <= qpos; window: qpos - kpos < W; inside Tk), so the mask comes from the
      // indices, per key two compares against this thread's bounds (less its column 2t).
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const int r = q0 + row0 + 8 * hr;
        const bool qok = r < p.Tq;
        const int rel = qok ? p.q_pos[r] - ks.z : 0;  // qpos - kpos at offset 0
        int hi = min(p.Tk - jj * BN - 1, p.causal ? rel : BN);
        if (!qok || p.q_seg[r] != ks.x) hi = -1;
        const int lo = (p.window > 0 ? rel - p.window + 1 : 0) - 2 * t;
        hi -= 2 * t;
#pragma unroll
        for (int n = 0; n < BN / 8; ++n)
#pragma unroll
          for (int e = 0; e < 2; ++e)
            if (n * 8 + e > hi || n * 8 + e < lo) sc[4 * n + 2 * hr + e] = -INFINITY;
      }
    } else if (cls == kPartial) {
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
          const int c = jj * BN + n * 8 + 2 * t + e;
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
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      float mx = m[hr];
#pragma unroll
      for (int n = 0; n < BN / 8; ++n) mx = fmaxf(mx, fmaxf(sc[4 * n + 2 * hr], sc[4 * n + 2 * hr + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      // Conditional rescaling (FlashAttention-4's): the maximum exponentiated against moves only when a tile's
      // maximum exceeds it by more than 8 in log2 units (or is the first finite one), so the probabilities stay at
      // most 2^8 and most key tiles need no correction of O and l (issue_pv rescales O only when a row of the warp
      // has one). The same function (O / l and the LSE use the maximum that was used), rounded a little
      // differently. Measured on an H100 (H 32 / Hkv 8, forward, 16K / 64K): D = 128 3.71 -> 3.58 and 61.0 -> 58.5
      // ms (2026-12-06); D = 64 first 1-2% slower, then, once the tile loop had fewer instructions, 2.355 -> 2.262
      // and 35.05 -> 34.94 ms (twenty-eighth session).
      const bool move = mx != -INFINITY && (m[hr] == -INFINITY || (mx - m[hr]) * sl2 > 8.f);
      corr[hr] = move && m[hr] != -INFINITY ? fast_exp2((m[hr] - mx) * sl2) : 1.f;
      if (move) m[hr] = mx;
      const float msc = m[hr] == -INFINITY ? 0.f : m[hr] * sl2;
      float rs = 0.f;
#pragma unroll
      for (int n = 0; n < BN / 8; ++n)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float pv = fast_exp2(fmaf(sc[4 * n + 2 * hr + e], sl2, -msc));
          sc[4 * n + 2 * hr + e] = pv;
          rs += pv;
        }
      l[hr] = l[hr] * corr[hr] + rs;
    }
  };
  auto pack_p = [&]() {
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      pa[kk][0] = pack2<E>(sc[8 * kk + 0], sc[8 * kk + 1]);
      pa[kk][1] = pack2<E>(sc[8 * kk + 2], sc[8 * kk + 3]);
      pa[kk][2] = pack2<E>(sc[8 * kk + 4], sc[8 * kk + 5]);
      pa[kk][3] = pack2<E>(sc[8 * kk + 6], sc[8 * kk + 7]);
    }
  };
  auto release = [&](uint32_t bar) {
    __syncwarp();
    if (lane == 0) mbar_arrive(bar);  // this warp is done with the slot
  };

  if (j < nkt) {
    if constexpr (PP) {
      if (wg == NWG - 1) named_bar_arrive(1, 256);  // the first turn is warpgroup 0's
    }
    mbar_wait(qbar, 0);
    // Tile 0: S_0 alone.
    int jn = vis.next(j + 1);
    mbar_wait(full_k(0), 0);
    turn_wait();
    issue_qk(0);
    turn_pass(jn >= nkt);
    wgmma_wait<0>();
    reg_fence(sc);
    release(empty_k(0));
    softmax(j);
    pack_p();
    // Tile it >= 1: S_it is issued, then P_{it-1} V_{it-1}; the softmax of S_it runs under the latter. The ring
    // positions of tiles it (s, slot it % STAGES in its use of parity ph = (it / STAGES) & 1) and it - 1 (sp, php)
    // are counted on rather than divided out per tile.
    int s = 1 % STAGES, sp = 0;
    uint32_t ph = 1 / STAGES, php = 0;
    for (j = jn; j < nkt; j = jn) {
      jn = vis.next(j + 1);
      mbar_wait(full_k(s), ph);
      turn_wait();
      issue_qk(s);
      mbar_wait(full_v(sp), php);
      issue_pv(sp);
      turn_pass(jn >= nkt);
      wgmma_wait<1>();  // S_it is in (the P V product may still run)
      reg_fence(sc);
      release(empty_k(s));
      softmax(j);
      wgmma_wait<0>();  // P_{it-1} V_{it-1} is in: P's registers and V's slot are free
      reg_fence(o);
      release(empty_v(sp));
      pack_p();
      sp = s;
      php = ph;
      if (++s == STAGES) {
        s = 0;
        ph ^= 1;
      }
    }
    // The last tile's P V.
    mbar_wait(full_v(sp), php);
    issue_pv(sp);
    wgmma_wait<0>();
    reg_fence(o);
    release(empty_v(sp));
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
