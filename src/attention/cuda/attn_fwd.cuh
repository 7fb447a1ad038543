// Flash-attention forward kernel template (instantiated in attn_fwd_d*.cu): one CTA per (BM-row
// query tile, query head), looping over the visible BN-key tiles of its KV head with an online
// softmax (FlashAttention-2 schedule). E: the 16-bit operand type (bf16 or f16, attn_common.cuh's
// Elem16); NW warps, each owning BM / NW query rows; MINB is the __launch_bounds__ residency hint
// (it caps registers).
//
// Per key tile j:  S = Q K_j^T (mma.sync, f32)  ->  mask (boundary tiles only)  ->
//   m' = max(m, rowmax S),  P = exp2(S*scale*log2e - m'*scale*log2e),  l' = l*exp2(..) + rowsum P,
//   O' = O*exp2(..) + P V_j (P as E A fragments straight from the S accumulators).
// Shared memory holds Q (BM x D), one K and one V tile (BN x D), in rows of smem_width(D) (D = 96
// in rows of 128); V_j streams in while S = Q K_j^T is computed and K_{j+1} while O += P V_j.
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

template <Elem E, int D, int BM, int BN, int NW, int MINB>
__global__ void __launch_bounds__(NW * 32, MINB) fwd_kernel(const FwdParams p) {
  constexpr int NT = NW * 32;
  constexpr int MT = BM / (16 * NW);          // 16-row m-tiles per warp
  constexpr int SN = BN / 8;                  // n-tiles of the score tile
  constexpr int KQ = D / 16;                  // k-steps of Q K^T
  constexpr int ON = D / 8;                   // n-tiles of the output
  constexpr bool kQRegs = MT * KQ * 4 <= 32;  // Q's A fragments stay in registers
  constexpr int DS = smem_width(D);           // row width of the shared tiles (96 -> 128)
  static_assert(MT >= 1 && BM == MT * 16 * NW, "BM must be a multiple of 16 * warps");
  static_assert(SN % 2 == 0 && ON % 2 == 0, "tiles come in pairs of n-tiles");

  extern __shared__ __align__(128) uint8_t smem[];
  const uint32_t sQ = smem_u32(smem);
  const uint32_t sK = sQ + BM * DS * 2;
  const uint32_t sV = sK + BN * DS * 2;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int qt = gridDim.x - 1 - blockIdx.x;  // heaviest causal tiles first
  const int h = blockIdx.y, hk = h / (p.H / p.Hkv);
  const int q0 = qt * BM;
  const int nkt = (p.Tk + BN - 1) / BN;
  const int64_t q_rs = static_cast<int64_t>(p.H) * D, kv_rs = static_cast<int64_t>(p.Hkv) * D;
  const uint16_t* qg = p.q + static_cast<int64_t>(h) * D;
  const uint16_t* kg = p.k + static_cast<int64_t>(hk) * D;
  const uint16_t* vg = p.v + static_cast<int64_t>(hk) * D;
  const float sl2 = p.scale * kLog2e;
  const int4 qs = p.q_stats[qt];
  const int wrow = warp * 16 * MT;  // this warp's first row in the tile
  const LdsmLane ld(lane);

  float o[MT][ON][4];
  float m[MT][2], l[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int dt = 0; dt < ON; ++dt)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[mt][dt][e] = 0.f;
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      m[mt][hr] = -INFINITY;
      l[mt][hr] = 0.f;
    }
  }

  VisibleTiles<true> vis{qs, p.k_stats, nkt, p.causal, p.window, lane};
  int j = vis.next(0);
  if (j < nkt) {
    load_tile<BM, D, NT>(sQ, qg, q_rs, q0, p.Tq, tid);
    load_tile<BN, D, NT>(sK, kg, kv_rs, j * BN, p.Tk, tid);
    cp_async_commit();
  }
  uint32_t qf[kQRegs ? MT : 1][kQRegs ? KQ : 1][4];
  bool q_in_regs = false;

  while (j < nkt) {
    const int jn = vis.next(j + 1);
    const int cls = tile_class(qs, p.k_stats[j], p.causal, p.window, (j + 1) * BN > p.Tk);
    cp_async_wait_all();
    __syncthreads();  // K_j (and Q) are in shared memory; every warp is done with V_{j-1}
    load_tile<BN, D, NT>(sV, vg, kv_rs, j * BN, p.Tk, tid);
    cp_async_commit();
    if constexpr (kQRegs) {
      if (!q_in_regs) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int ks = 0; ks < KQ; ++ks)
            ldsm_x4(qf[mt][ks], ld.a<DS>(sQ, wrow + mt * 16, ks));
        q_in_regs = true;
      }
    }

    // S = Q K_j^T
    float s[MT][SN][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < SN; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mt][nt][e] = 0.f;
#pragma unroll
    for (int ks = 0; ks < KQ; ++ks) {
      uint32_t a[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        if constexpr (kQRegs) {
#pragma unroll
          for (int e = 0; e < 4; ++e) a[mt][e] = qf[mt][ks][e];
        } else {
          ldsm_x4(a[mt], ld.a<DS>(sQ, wrow + mt * 16, ks));
        }
      }
#pragma unroll
      for (int np = 0; np < SN / 2; ++np) {
        uint32_t b[4];
        ldsm_x4(b, ld.b<DS>(sK, np * 16, ks));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma16816<E>(s[mt][2 * np], a[mt], b[0], b[1]);
          mma16816<E>(s[mt][2 * np + 1], a[mt], b[2], b[3]);
        }
      }
    }

    // Boundary tile: element-wise mask (out-of-range keys and rows are masked too).
    if (cls == kPartial) {
      // This thread's query rows q0 + wrow + mt*16 + g + 8*hr (read here, not kept in registers).
      int qseg[MT][2], qpos[MT][2];
      bool qok[MT][2];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
          const int r = q0 + wrow + mt * 16 + g + 8 * hr;
          qok[mt][hr] = r < p.Tq;
          qseg[mt][hr] = qok[mt][hr] ? p.q_seg[r] : 0;
          qpos[mt][hr] = qok[mt][hr] ? p.q_pos[r] : 0;
        }
#pragma unroll
      for (int nt = 0; nt < SN; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int c = j * BN + nt * 8 + 2 * t + e;
          const bool cok = c < p.Tk;
          const int kseg = cok ? p.k_seg[c] : 0;
          const int kpos = cok ? p.k_pos[c] : 0;
#pragma unroll
          for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int hr = 0; hr < 2; ++hr) {
              const bool vis = cok && qok[mt][hr] && elem_visible(qseg[mt][hr], qpos[mt][hr], kseg, kpos, p.causal, p.window);
              if (!vis) s[mt][nt][2 * hr + e] = -INFINITY;
            }
        }
    }

    // Online softmax. A row whose keys are all masked so far keeps m = -inf, l = 0, O = 0.
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        float mx = m[mt][hr];
#pragma unroll
        for (int nt = 0; nt < SN; ++nt) mx = fmaxf(mx, fmaxf(s[mt][nt][2 * hr], s[mt][nt][2 * hr + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float corr = mx == -INFINITY ? 1.f : fast_exp2((m[mt][hr] - mx) * sl2);
        const float msc = mx == -INFINITY ? 0.f : mx * sl2;
        m[mt][hr] = mx;
        float rs = 0.f;
#pragma unroll
        for (int nt = 0; nt < SN; ++nt)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const float pv = fast_exp2(fmaf(s[mt][nt][2 * hr + e], sl2, -msc));
            s[mt][nt][2 * hr + e] = pv;
            rs += pv;
          }
        l[mt][hr] = l[mt][hr] * corr + rs;
#pragma unroll
        for (int dt = 0; dt < ON; ++dt) {
          o[mt][dt][2 * hr] *= corr;
          o[mt][dt][2 * hr + 1] *= corr;
        }
      }

    cp_async_wait_all();
    __syncthreads();  // V_j is in shared memory; every warp is done with K_j
    if (jn < nkt) {
      load_tile<BN, D, NT>(sK, kg, kv_rs, jn * BN, p.Tk, tid);
      cp_async_commit();
    }

    // O += P V_j
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      uint32_t a[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        a[mt][0] = pack2<E>(s[mt][2 * kk][0], s[mt][2 * kk][1]);
        a[mt][1] = pack2<E>(s[mt][2 * kk][2], s[mt][2 * kk][3]);
        a[mt][2] = pack2<E>(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
        a[mt][3] = pack2<E>(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
      }
#pragma unroll
      for (int dp = 0; dp < ON / 2; ++dp) {
        uint32_t b[4];
        ldsm_x4_t(b, ld.bt<DS>(sV, kk * 16, dp));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma16816<E>(o[mt][2 * dp], a[mt], b[0], b[1]);
          mma16816<E>(o[mt][2 * dp + 1], a[mt], b[2], b[3]);
        }
      }
    }
    j = jn;
  }

  // out = O / l; lse = scale*m + ln l. Rows that saw no key: out 0, lse -inf.
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      float ls = l[mt][hr];
      ls += __shfl_xor_sync(0xffffffffu, ls, 1);
      ls += __shfl_xor_sync(0xffffffffu, ls, 2);
      const int r = q0 + wrow + mt * 16 + g + 8 * hr;
      if (r >= p.Tq) continue;
      const float inv = ls > 0.f ? 1.f / ls : 0.f;
      const int64_t base = (static_cast<int64_t>(r) * p.H + h) * D;
#pragma unroll
      for (int dt = 0; dt < ON; ++dt) {
        const int col = dt * 8 + 2 * t;
        const float v0 = o[mt][dt][2 * hr] * inv, v1 = o[mt][dt][2 * hr + 1] * inv;
        if (p.out_f32) {
          *reinterpret_cast<float2*>(static_cast<float*>(p.out) + base + col) = make_float2(v0, v1);
        } else {
          *reinterpret_cast<uint32_t*>(static_cast<uint16_t*>(p.out) + base + col) = pack2<E>(v0, v1);
        }
      }
      if (t == 0) {
        p.lse[static_cast<int64_t>(r) * p.H + h] = ls > 0.f ? (m[mt][hr] * sl2 + log2f(ls)) * kLn2 : -INFINITY;
      }
    }
}

template <Elem E, int D, int BM, int BN, int NW, int MINB>
void run_fwd(const FwdParams& p, cudaStream_t stream) {
  SEQPAR_CHECK_MSG(p.elem == E, "run_fwd: the parameters' element type is not the instantiation's");
  if (p.Tq == 0 || p.H == 0) return;
  constexpr int smem = (BM + 2 * BN) * smem_width(D) * 2;
  auto kernel = fwd_kernel<E, D, BM, BN, NW, MINB>;
  SEQPAR_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const dim3 grid((p.Tq + BM - 1) / BM, p.H);
  kernel<<<grid, NW * 32, smem, stream>>>(p);
  SEQPAR_LAUNCH_CHECK();
}

}  // namespace seqpar::cuda_attn::detail
