// Device helpers shared by the flash-attention kernels: the 16-bit element trait (Elem16: bf16 or
// f16 tensor-core MMA mma.sync m16n8k16 with f32 accumulate, f32 <-> 16-bit conversions),
// ldmatrix, cp.async tile loads into XOR-swizzled shared memory, and the tile classification by
// mask metadata. Included by .cu files only.
//
// Fragment layouts of mma.m16n8k16 (g = lane / 4, t = lane % 4):
//   A (16x16, row-major) 4 regs: (g, 2t..2t+1) (g+8, 2t..) (g, 2t+8..) (g+8, 2t+8..)
//   B (16x8, "col": stored as [n][k]) 2 regs: (k 2t..2t+1, n g) (k 2t+8.., n g)
//   C (16x8 f32) 4 regs: (g, 2t) (g, 2t+1) (g+8, 2t) (g+8, 2t+1)
// ldmatrix.x4 loads four 8x8 b16 matrices; lanes 8i..8i+7 give the row addresses of matrix i;
// each lane receives (row lane/4, cols 2(lane%4)..+1) of each matrix (.trans: the transpose).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "attention/cuda/attn_launch.h"  // Elem

namespace seqpar::cuda_attn::dev {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// The sm_90 backward's order of lse2 / delta within each 16 query rows (launch_bwd_prep's lane_order): row
// c = 8n + 2t + e (n < 2, t < 4, e < 2) at slot 4t + 2n + e, so that the four lanes t of an accumulator's row
// group each read their rows' values as one 16-byte load, the four loads 16 bytes apart (no bank conflict).
__host__ __device__ constexpr int stats_lane_slot(int c) { return ((c >> 1) & 3) * 4 + ((c >> 3) & 1) * 2 + (c & 1); }

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared, asynchronous; valid == false zero-fills (no global read).
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
  const int n = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

__device__ __forceinline__ void sts_u32(uint32_t addr, uint32_t v) {
  asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}

// The 16-bit element type's device operations; everything else in the kernels (fragment layouts,
// ldmatrix, swizzles, byte counts) is the same for both types, 2 bytes an element.
//   mma:     c += a * b, mma.sync m16n8k16 on E operands, f32 accumulators.
//   pack:    two floats -> E x2 (round to nearest even), lo in the low half (the lower column).
//            f16 rounds to +-inf past its largest value, 65504 (no .satfinite): P (in [0, 1]) and the outputs (convex
//            combinations of v) always fit; dS = P (dP - Delta) and the gradients fit unless the loss scale has
//            overflowed them, which the loss scaler's non-finite check then sees (train/loss_scaler.h).
//   to_f32:  E bits -> f32 (bf16: a shift; f16: a conversion, not a shift).
template <Elem E>
struct Elem16;

template <>
struct Elem16<Elem::kBf16> {
  static __device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    uint32_t r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
  }
  static __device__ __forceinline__ float to_f32(uint16_t b) { return __uint_as_float(static_cast<uint32_t>(b) << 16); }
};

template <>
struct Elem16<Elem::kF16> {
  static __device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    uint32_t r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
  }
  static __device__ __forceinline__ float to_f32(uint16_t b) { return __half2float(__ushort_as_half(b)); }
};

// Shorthands for the kernels: mma16816<E>(c, a, b0, b1), pack2<E>(lo, hi), bits_to_f32<E>(b).
template <Elem E>
__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  Elem16<E>::mma(c, a, b0, b1);
}
template <Elem E>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  return Elem16<E>::pack(lo, hi);
}
template <Elem E>
__device__ __forceinline__ float bits_to_f32(uint16_t b) {
  return Elem16<E>::to_f32(b);
}

// 2^x, the MUFU instruction (2 ulp); ex2(-inf) = +0.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Byte offset of the 16-byte chunk `chunk` of row `row` in a [rows][W] 16-bit tile whose chunks
// are XOR-swizzled by the row's low 3 bits: the 8 rows an ldmatrix phase reads (and the rows a
// warp's fragment stores hit) land in 8 different bank groups.
template <int W>
__device__ __forceinline__ uint32_t swz(int row, int chunk) {
  return static_cast<uint32_t>(row * (W * 2) + ((chunk ^ (row & 7)) << 4));
}

// Per-lane parts of the swizzled ldmatrix addresses, computed once, so that every address in the
// unrolled loops is one register plus an immediate. The four ldmatrix.x4 patterns (rows R0..R0+15,
// 16-byte chunks 2c and 2c+1):
//   a  (A operand):              row R0 + (lane & 15),                   chunk 2c + (lane >> 4)
//   b  (B operand, [n][k] tile): row R0 + (lane & 7) + 8 (lane >> 4),    chunk 2c + ((lane >> 3) & 1)
//   bt (B operand, [k][n], .trans): row R0 + (lane & 7) + 8 ((lane >> 3) & 1), chunk 2c + (lane >> 4)
//   at (A operand, [k][m], .trans): as b (at_rt: with a run-time chunk pair)
// With R0 a multiple of 8 the swizzle key (row & 7) is lane & 7, and for c = 4 c_hi + c_lo,
// (2c + bit) ^ (lane & 7) = 8 c_hi + ((2 c_lo + bit) ^ (lane & 7)): a 4-entry table per bit.
struct LdsmLane {
  uint32_t tab_hi[4];   // chunk bit lane >> 4
  uint32_t tab_mid[4];  // chunk bit (lane >> 3) & 1
  int row_a, row_b, row_bt;
  int r7, bm;

  __device__ __forceinline__ explicit LdsmLane(int lane) : r7(lane & 7), bm((lane >> 3) & 1) {
    const int bh = lane >> 4;
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      tab_hi[c] = static_cast<uint32_t>(((2 * c + bh) ^ r7) << 4);
      tab_mid[c] = static_cast<uint32_t>(((2 * c + bm) ^ r7) << 4);
    }
    row_a = lane & 15;
    row_b = (lane & 7) + (bh << 3);
    row_bt = (lane & 7) + (bm << 3);
  }
  template <int W>
  __device__ __forceinline__ uint32_t a(uint32_t tile, int R0, int c) const {
    return tile + (R0 + row_a) * (W * 2) + (c >> 2) * 128 + tab_hi[c & 3];
  }
  template <int W>
  __device__ __forceinline__ uint32_t b(uint32_t tile, int R0, int c) const {
    return tile + (R0 + row_b) * (W * 2) + (c >> 2) * 128 + tab_mid[c & 3];
  }
  template <int W>
  __device__ __forceinline__ uint32_t bt(uint32_t tile, int R0, int c) const {
    return tile + (R0 + row_bt) * (W * 2) + (c >> 2) * 128 + tab_hi[c & 3];
  }
  // Pattern at (= b) with a run-time chunk pair c: the column part is computed, not looked up.
  template <int W>
  __device__ __forceinline__ uint32_t at_rt(uint32_t tile, int R0, int c) const {
    const int ch = 2 * c + bm;
    return tile + (R0 + row_b) * (W * 2) + static_cast<uint32_t>(((ch & ~7) | ((ch & 7) ^ r7)) << 4);
  }
};

// The row width (in 16-bit elements) of a shared [rows][D] tile: D rounded up to a multiple of 64.
// The swizzle permutes the 16-byte chunks within each 128-byte group (8 chunks) of a row, so a row
// must hold whole groups: D = 96 (12 chunks) is laid out in rows of 128 elements, chunks 12..15
// unused (never loaded, never read). D = 64 and 128 are their own width.
constexpr int smem_width(int D) { return (D + 63) / 64 * 64; }

// ROWS x D 16-bit rows [row0, row0 + ROWS) of a strided global matrix into a swizzled shared tile of
// row width W (smem_width(D)); rows >= T are zero-filled. NT threads, thread tid.
template <int ROWS, int D, int NT, int W = smem_width(D)>
__device__ __forceinline__ void load_tile(uint32_t s_tile, const uint16_t* g, int64_t row_stride, int row0, int T,
                                          int tid) {
  static_assert(D % 8 == 0 && W % 64 == 0 && D <= W, "whole 16-byte chunks in whole 128-byte groups");
  constexpr int CH = D / 8;
  constexpr int TOTAL = ROWS * CH;
  static_assert(TOTAL % NT == 0, "tile chunks must divide evenly among threads");
#pragma unroll
  for (int i = 0; i < TOTAL / NT; ++i) {
    const int c = tid + i * NT;
    const int r = c / CH, ch = c % CH;
    const int gr = row0 + r;
    const bool valid = gr < T;
    const uint16_t* src = g + static_cast<int64_t>(valid ? gr : 0) * row_stride + ch * 8;
    cp_async16(s_tile + swz<W>(r, ch), src, valid);
  }
}

// Tile classes by metadata ranges {seg_min, seg_max, pos_min, pos_max}.
enum TileClass : int { kSkip = 0, kFull = 1, kPartial = 2 };

__device__ __forceinline__ bool tile_visible(const int4 qs, const int4 ks, bool causal, int window) {
  if (qs.y < ks.x || ks.y < qs.x) return false;  // segment ranges disjoint
  if (causal && ks.z > qs.w) return false;       // every key after every query
  // Every key before every query's window: even the latest key and the earliest query are W apart.
  if (window > 0 && static_cast<long long>(qs.z) - ks.w >= window) return false;
  return true;
}

// Assumes tile_visible. `ragged`: a tile that runs past the end of its tokens. With a window, a
// tile is full only when even the earliest key is inside the latest query's window.
__device__ __forceinline__ int tile_class(const int4 qs, const int4 ks, bool causal, int window, bool ragged) {
  if (ragged) return kPartial;
  const bool one_seg = qs.x == qs.y && ks.x == ks.y && qs.x == ks.x;
  const bool in_window = window <= 0 || static_cast<long long>(qs.w) - ks.z < window;
  if (one_seg && (!causal || ks.w <= qs.z) && in_window) return kFull;
  return kPartial;
}

// The element rule of attention.h for one (query, key) pair whose metadata is at hand.
__device__ __forceinline__ bool elem_visible(int qseg, int qpos, int kseg, int kpos, bool causal, int window) {
  return qseg == kseg && (!causal || kpos <= qpos) && (window <= 0 || qpos - kpos < window);
}

// Walks the visible tiles in order. next(from): the first tile j in [from, n) with tile_visible(fixed, stats[j])
// (or, when the stats are the query side, tile_visible(stats[j], fixed)); n if none. A scan reads 32 tiles' stats,
// one per lane, and keeps their ballot, so a walk that moves forward reads each tile's stats once instead of once
// per call (the sm_90 kernels call it once per tile). Every warp of a block computes the same answers.
template <bool STATS_ARE_KEYS>
struct VisibleTiles {
  int4 fixed;
  const int4* __restrict__ stats;
  int n;
  bool causal;
  int window;
  int lane;
  int base = -64;     // the last scan's tiles: [base, base + 32) (none before the first scan)
  unsigned mask = 0;  // their ballot

  __device__ __forceinline__ int next(int from) {
    if (from >= base && from < base + 32) {
      const unsigned b = mask & (0xffffffffu << (from - base));
      if (b) return base + __ffs(b) - 1;
      from = base + 32;
    }
    for (; from < n; from += 32) {
      const int j = from + lane;
      bool vis = false;
      if (j < n) {
        const int4 s = stats[j];
        vis = STATS_ARE_KEYS ? tile_visible(fixed, s, causal, window) : tile_visible(s, fixed, causal, window);
      }
      base = from;
      mask = __ballot_sync(0xffffffffu, vis);
      if (mask) return base + __ffs(mask) - 1;
    }
    return n;
  }
};

}  // namespace seqpar::cuda_attn::dev
