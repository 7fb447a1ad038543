// Flash-attention backward kernel template (FlashAttention-2 schedule; instantiated in
// attn_bwd_d*.cu): one CTA per (BN-key tile, KV head); each
// warp owns 16 keys. The CTA loops over the visible BM-query tiles and, inside, over the query
// heads of its GQA group, so dK and dV of its keys are complete (summed over the group) in
// registers at the end and are added to (or, with write_grads, stored into) dk/dv without atomics.
// dQ goes through f32 atomics into a workspace that a last kernel adds (stores), scaled, to dq.
//
// Per (query tile, head), with the FINAL lse and Delta = rowsum(dO * O) from a pre-pass:
//   S^T = K Q^T,  P^T = exp2(S^T*scale*log2e - lse*log2e)  (masked on boundary tiles),
//   dV += P^T dO,  dP^T = V dO^T,  dS^T = P^T (dP^T - Delta),  dK += dS^T Q,
//   dS^T -> shared (E),  dQ_acc += dS K  (atomics).
// All products are mma.sync m16n8k16 on E operands (bf16 or f16, attn_common.cuh's Elem16) with
// f32 accumulators; P and dS enter the next product as E A fragments straight from the accumulators. Q, dO, lse and
// Delta of the next step are prefetched (cp.async, double buffer) while the current one is computed.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "attention/cuda/attn_common.cuh"
#include "attention/cuda/attn_launch.h"
#include "core/cuda_check.h"
#include "core/error_base.h"

namespace seqpar::cuda_attn::detail {

using namespace dev;

// dst[0..1] += (v0, v1), or = (v0, v1) when `write` (the old value is then not read), for an E or
// f32 gradient row (the sum in f32, rounded once).
template <Elem E>
__device__ __forceinline__ void store_pair(void* base, bool f32, bool write, int64_t off, float v0, float v1) {
  if (f32) {
    float2* d = reinterpret_cast<float2*>(static_cast<float*>(base) + off);
    if (write) {
      *d = make_float2(v0, v1);
    } else {
      float2 x = *d;
      x.x += v0;
      x.y += v1;
      *d = x;
    }
  } else {
    uint32_t* d = reinterpret_cast<uint32_t*>(static_cast<uint16_t*>(base) + off);
    if (write) {
      *d = pack2<E>(v0, v1);
    } else {
      const uint32_t x = *d;
      *d = pack2<E>(bits_to_f32<E>(static_cast<uint16_t>(x & 0xffffu)) + v0,
                    bits_to_f32<E>(static_cast<uint16_t>(x >> 16)) + v1);
    }
  }
}

// Tiles of D columns in rows of DS = smem_width(D) elements (D = 96 in rows of 128).
template <int D, int BM, int BN, int NW>
struct BwdSmem {
  static constexpr int DS = smem_width(D);
  static constexpr int kTile = BM * DS * 2;       // one Q or dO tile, bytes
  static constexpr int K = 0;                     // [BN][DS] 16-bit
  static constexpr int V = K + BN * DS * 2;       // [BN][DS] 16-bit
  static constexpr int Q = V + BN * DS * 2;       // [2][BM][DS] 16-bit
  static constexpr int dO = Q + 2 * kTile;        // [2][BM][DS] 16-bit
  static constexpr int dS = dO + 2 * kTile;       // [BN][BM] 16-bit (dS^T: key rows)
  static constexpr int L = dS + BN * BM * 2;      // [2][BM] f32 lse2
  static constexpr int Dl = L + 2 * BM * 4;       // [2][BM] f32 delta
  static constexpr int kBytes = Dl + 2 * BM * 4;
};

template <Elem E, int D, int BM, int BN, int NW>
__global__ void __launch_bounds__(NW * 32) bwd_kernel(const BwdParams p) {
  constexpr int NT = NW * 32;
  constexpr int SN = BM / 8;   // query n-tiles of S^T
  constexpr int KD = D / 16;   // k-steps over the head dim
  constexpr int ON = D / 8;    // head-dim n-tiles
  constexpr int KM = BM / 16;  // k-steps over queries
  constexpr int WQ = BM / 16;  // dQ: query groups of 16 rows ...
  constexpr int WD = NW / WQ;  // ... times head-dim groups
  constexpr int DQN = ON / WD;  // dQ n-tiles per warp
  static_assert(BN == 16 * NW, "each warp owns 16 keys");
  // With several head-dim groups (WD > 1) each warp's columns start a whole 8-chunk swizzle group
  // (sK_wd below); with one (WD = 1, the D = 96 tiles) the warp takes every column from chunk 0.
  static_assert(NW % WQ == 0 && ON % WD == 0 && (WD == 1 || DQN % 8 == 0),
                "dQ warp split (whole 8-chunk groups per warp)");
  static_assert(BM / 2 <= NT, "lse/delta loads: one 16-byte chunk per thread");
  using S = BwdSmem<D, BM, BN, NW>;
  constexpr int DS = S::DS;

  extern __shared__ __align__(128) uint8_t smem[];
  const uint32_t s0 = smem_u32(smem);
  const uint32_t sK = s0 + S::K, sV = s0 + S::V, sQ = s0 + S::Q, sdO = s0 + S::dO, sdS = s0 + S::dS;
  const float* sL = reinterpret_cast<const float*>(smem + S::L);
  const float* sDl = reinterpret_cast<const float*>(smem + S::Dl);

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;
  const LdsmLane ld(lane);
  const int kt = blockIdx.x, hk = blockIdx.y;
  const int G = p.H / p.Hkv;
  const int k0 = kt * BN;
  const int nqt = (p.Tq + BM - 1) / BM;
  const int Tq_pad = nqt * BM;
  const int64_t q_rs = static_cast<int64_t>(p.H) * D, kv_rs = static_cast<int64_t>(p.Hkv) * D;
  const float sl2 = p.scale * kLog2e;
  const int4 ks = p.k_stats[kt];
  const bool k_ragged = k0 + BN > p.Tk;

  auto issue_q_tile = [&](int qi, int h, int buf) {
    load_tile<BM, D, NT>(sQ + buf * S::kTile, p.q + static_cast<int64_t>(h) * D, q_rs, qi * BM, p.Tq, tid);
    load_tile<BM, D, NT>(sdO + buf * S::kTile, p.dout + static_cast<int64_t>(h) * D, q_rs, qi * BM, p.Tq, tid);
    const int64_t off = static_cast<int64_t>(h) * Tq_pad + static_cast<int64_t>(qi) * BM;
    if (tid < BM / 4) {
      cp_async16(s0 + S::L + buf * BM * 4 + tid * 16, p.lse2 + off + tid * 4, true);
    } else if (tid < BM / 2) {
      const int c = tid - BM / 4;
      cp_async16(s0 + S::Dl + buf * BM * 4 + c * 16, p.delta + off + c * 4, true);
    }
  };

  float dk[ON][4], dv[ON][4];
#pragma unroll
  for (int dt = 0; dt < ON; ++dt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      dk[dt][e] = 0.f;
      dv[dt][e] = 0.f;
    }

  VisibleTiles<false> vis{ks, p.q_stats, nqt, p.causal, p.window, lane};
  int i = vis.next(0);
  const bool any = i < nqt;
  int gi = 0, buf = 0;
  if (any) {
    load_tile<BN, D, NT>(sK, p.k + static_cast<int64_t>(hk) * D, kv_rs, k0, p.Tk, tid);
    load_tile<BN, D, NT>(sV, p.v + static_cast<int64_t>(hk) * D, kv_rs, k0, p.Tk, tid);
    issue_q_tile(i, hk * G, 0);
    cp_async_commit();
  }

  while (i < nqt) {
    const int h = hk * G + gi;
    int ni = i, ngi = gi + 1;
    if (ngi == G) {
      ngi = 0;
      ni = vis.next(i + 1);
    }
    const int cls = tile_class(p.q_stats[i], ks, p.causal, p.window, k_ragged || (i + 1) * BM > p.Tq);
    cp_async_wait_all();
    __syncthreads();  // this step's Q, dO, lse2, delta are in; every warp is done with the last step
    if (ni < nqt) {
      issue_q_tile(ni, hk * G + ngi, buf ^ 1);
      cp_async_commit();
    }
    const uint32_t q_s = sQ + buf * S::kTile, do_s = sdO + buf * S::kTile;
    const float* L = sL + buf * BM;
    const float* Dl = sDl + buf * BM;

    // S^T = K Q^T: this warp's 16 keys x BM queries.
    float st[SN][4];
#pragma unroll
    for (int nt = 0; nt < SN; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) st[nt][e] = 0.f;
#pragma unroll
    for (int kd = 0; kd < KD; ++kd) {
      uint32_t a[4];
      ldsm_x4(a, ld.a<DS>(sK, warp * 16, kd));
#pragma unroll
      for (int np = 0; np < SN / 2; ++np) {
        uint32_t b[4];
        ldsm_x4(b, ld.b<DS>(q_s, np * 16, kd));
        mma16816<E>(st[2 * np], a, b[0], b[1]);
        mma16816<E>(st[2 * np + 1], a, b[2], b[3]);
      }
    }

    // P^T = exp(scale * S^T - lse); masked entries 0.
#pragma unroll
    for (int nt = 0; nt < SN; ++nt) {
      const float2 lq = *reinterpret_cast<const float2*>(L + nt * 8 + 2 * t);
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        st[nt][2 * hr] = fast_exp2(fmaf(st[nt][2 * hr], sl2, -lq.x));
        st[nt][2 * hr + 1] = fast_exp2(fmaf(st[nt][2 * hr + 1], sl2, -lq.y));
      }
    }
    if (cls == kPartial) {
      // This thread's keys k0 + warp*16 + g + 8*hr (read here, not kept in registers).
      int kseg[2], kpos[2];
      bool kok[2];
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const int c = k0 + warp * 16 + g + 8 * hr;
        kok[hr] = c < p.Tk;
        kseg[hr] = kok[hr] ? p.k_seg[c] : 0;
        kpos[hr] = kok[hr] ? p.k_pos[c] : 0;
      }
#pragma unroll
      for (int nt = 0; nt < SN; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int qr = i * BM + nt * 8 + 2 * t + e;
          const bool qok = qr < p.Tq;
          const int qseg = qok ? p.q_seg[qr] : 0;
          const int qpos = qok ? p.q_pos[qr] : 0;
#pragma unroll
          for (int hr = 0; hr < 2; ++hr) {
            const bool vis = qok && kok[hr] && elem_visible(qseg, qpos, kseg[hr], kpos[hr], p.causal, p.window);
            if (!vis) st[nt][2 * hr + e] = 0.f;
          }
        }
    }

    // dV += P^T dO
#pragma unroll
    for (int kk = 0; kk < KM; ++kk) {
      uint32_t a[4];
      a[0] = pack2<E>(st[2 * kk][0], st[2 * kk][1]);
      a[1] = pack2<E>(st[2 * kk][2], st[2 * kk][3]);
      a[2] = pack2<E>(st[2 * kk + 1][0], st[2 * kk + 1][1]);
      a[3] = pack2<E>(st[2 * kk + 1][2], st[2 * kk + 1][3]);
#pragma unroll
      for (int dp = 0; dp < ON / 2; ++dp) {
        uint32_t b[4];
        ldsm_x4_t(b, ld.bt<DS>(do_s, kk * 16, dp));
        mma16816<E>(dv[2 * dp], a, b[0], b[1]);
        mma16816<E>(dv[2 * dp + 1], a, b[2], b[3]);
      }
    }

    // dP^T = V dO^T
    float dpt[SN][4];
#pragma unroll
    for (int nt = 0; nt < SN; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) dpt[nt][e] = 0.f;
#pragma unroll
    for (int kd = 0; kd < KD; ++kd) {
      uint32_t a[4];
      ldsm_x4(a, ld.a<DS>(sV, warp * 16, kd));
#pragma unroll
      for (int np = 0; np < SN / 2; ++np) {
        uint32_t b[4];
        ldsm_x4(b, ld.b<DS>(do_s, np * 16, kd));
        mma16816<E>(dpt[2 * np], a, b[0], b[1]);
        mma16816<E>(dpt[2 * np + 1], a, b[2], b[3]);
      }
    }

    // dS^T = P^T (dP^T - Delta)
#pragma unroll
    for (int nt = 0; nt < SN; ++nt) {
      const float2 dq2 = *reinterpret_cast<const float2*>(Dl + nt * 8 + 2 * t);
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        dpt[nt][2 * hr] = st[nt][2 * hr] * (dpt[nt][2 * hr] - dq2.x);
        dpt[nt][2 * hr + 1] = st[nt][2 * hr + 1] * (dpt[nt][2 * hr + 1] - dq2.y);
      }
    }

    // dK += dS^T Q; dS^T (E) -> shared memory for dQ.
#pragma unroll
    for (int kk = 0; kk < KM; ++kk) {
      uint32_t a[4];
      a[0] = pack2<E>(dpt[2 * kk][0], dpt[2 * kk][1]);
      a[1] = pack2<E>(dpt[2 * kk][2], dpt[2 * kk][3]);
      a[2] = pack2<E>(dpt[2 * kk + 1][0], dpt[2 * kk + 1][1]);
      a[3] = pack2<E>(dpt[2 * kk + 1][2], dpt[2 * kk + 1][3]);
      // Row r = warp*16 + g (+8) of the swizzled [BN][BM] tile: swizzle key r & 7 = g.
      const uint32_t row0 = sdS + (warp * 16 + g) * (BM * 2) + 4 * t, row8 = row0 + 8 * (BM * 2);
      const uint32_t c0 = static_cast<uint32_t>((((2 * kk) & ~7) | (((2 * kk) & 7) ^ g)) << 4);
      const uint32_t c1 = static_cast<uint32_t>((((2 * kk + 1) & ~7) | (((2 * kk + 1) & 7) ^ g)) << 4);
      sts_u32(row0 + c0, a[0]);
      sts_u32(row8 + c0, a[1]);
      sts_u32(row0 + c1, a[2]);
      sts_u32(row8 + c1, a[3]);
#pragma unroll
      for (int dp = 0; dp < ON / 2; ++dp) {
        uint32_t b[4];
        ldsm_x4_t(b, ld.bt<DS>(q_s, kk * 16, dp));
        mma16816<E>(dk[2 * dp], a, b[0], b[1]);
        mma16816<E>(dk[2 * dp + 1], a, b[2], b[3]);
      }
    }
    __syncthreads();  // dS^T of every warp is in shared memory

    // dQ_acc += dS K: warp (wq, wd) computes queries wq*16.. x head-dim n-tiles wd*DQN..
    {
      const int wq = warp % WQ, wd = warp / WQ;
      const uint32_t sK_wd = sK + wd * (DQN / 8) * 128;  // this warp's head-dim columns: whole 8-chunk groups
      float dqa[DQN][4];
#pragma unroll
      for (int dn = 0; dn < DQN; ++dn)
#pragma unroll
        for (int e = 0; e < 4; ++e) dqa[dn][e] = 0.f;
#pragma unroll
      for (int kk = 0; kk < BN / 16; ++kk) {
        uint32_t a[4];
        ldsm_x4_t(a, ld.at_rt<BM>(sdS, kk * 16, wq));
#pragma unroll
        for (int dp = 0; dp < DQN / 2; ++dp) {
          uint32_t b[4];
          ldsm_x4_t(b, ld.bt<DS>(sK_wd, kk * 16, dp));
          mma16816<E>(dqa[2 * dp], a, b[0], b[1]);
          mma16816<E>(dqa[2 * dp + 1], a, b[2], b[3]);
        }
      }
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const int qr = i * BM + wq * 16 + g + 8 * hr;
        if (qr >= p.Tq) continue;
        float* dst = p.dq_acc + (static_cast<int64_t>(qr) * p.H + h) * D;
#pragma unroll
        for (int dn = 0; dn < DQN; ++dn) {
          const int col = (wd * DQN + dn) * 8 + 2 * t;
          atomicAdd(reinterpret_cast<float2*>(dst + col), make_float2(dqa[dn][2 * hr], dqa[dn][2 * hr + 1]));
        }
      }
    }
    i = ni;
    gi = ngi;
    buf ^= 1;
  }
  cp_async_wait_all();
  // No query sees these keys: nothing to add; when writing, their dk/dv (still 0 in registers)
  // must be stored all the same.
  if (!any && !p.write_grads) return;

  // dk (+)= scale * dK, dv (+)= dV for this CTA's keys (exclusive: no atomics).
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int c = k0 + warp * 16 + g + 8 * hr;
    if (c >= p.Tk) continue;
    const int64_t base = (static_cast<int64_t>(c) * p.Hkv + hk) * D;
#pragma unroll
    for (int dt = 0; dt < ON; ++dt) {
      const int col = dt * 8 + 2 * t;
      store_pair<E>(p.dk, p.grad_f32, p.write_grads, base + col, p.scale * dk[dt][2 * hr],
                    p.scale * dk[dt][2 * hr + 1]);
      store_pair<E>(p.dv, p.grad_f32, p.write_grads, base + col, dv[dt][2 * hr], dv[dt][2 * hr + 1]);
    }
  }
}

template <Elem E, int D, int BM, int BN, int NW>
void run_bwd_main(const BwdParams& p, cudaStream_t stream) {
  SEQPAR_CHECK_MSG(p.elem == E, "run_bwd_main: the parameters' element type is not the instantiation's");
  if (p.Tq == 0 || p.Tk == 0 || p.H == 0) return;
  constexpr int smem = BwdSmem<D, BM, BN, NW>::kBytes;
  auto kernel = bwd_kernel<E, D, BM, BN, NW>;
  SEQPAR_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const dim3 grid((p.Tk + BN - 1) / BN, p.Hkv);
  kernel<<<grid, NW * 32, smem, stream>>>(p);
  SEQPAR_LAUNCH_CHECK();
}

}  // namespace seqpar::cuda_attn::detail
