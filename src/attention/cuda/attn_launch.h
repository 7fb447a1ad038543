// Raw-pointer launchers of seqpar's flash attention (FlashAttention-2 class: mma.sync m16n8k16
// tensor-core tiles on bf16 or f16 operands with f32 accumulators, online softmax, no [S, S]
// scores), shared by the .cu kernels and the Tensor-level entries in attention_cuda.cpp. Free of fmt
// and Tensor, so nvcc can compile it.
//
// Layouts are token-major and dense: q/out [Tq, H, D], k/v [Tk, Hkv, D], lse f32 [Tq, H]. 16-bit
// tensors (bf16 or f16, FwdParams::elem) are passed as uint16_t bit patterns. Mask metadata (seg, pos: i32 [T], device
// memory) follows attention/attention.h: query i sees key j iff seg_q[i] == seg_k[j] and (not causal or pos_k[j] <=
// pos_q[i]) and (window == 0 or pos_q[i] - pos_k[j] < window). Per-tile min/max of seg and pos (tile_stats) let the
// kernels skip fully masked tiles, run fully visible tiles without per-element checks, and check only the boundary
// tiles element by element; so causal, varlen and any sequence-parallel layout share one kernel.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>
#include <vector>

#include "attention/attention_policy.h"

namespace seqpar::cuda_attn {

// Tile shapes. Forward: BM query rows per CTA, BN keys per inner step, `warps` warps each owning
// BM / warps rows. Backward: BN keys per CTA (16 per warp), BM queries per inner step. The
// instantiated shapes and the default per head dim are listed in attn_dispatch.cpp, one table.
// The 16-bit type of q, k, v, dout and of 16-bit out / dq / dk / dv: every kernel is instantiated
// for both (attn_common.cuh's Elem16 trait: the MMA instruction, the f32 <-> 16-bit conversions);
// launch_fwd / launch_bwd pick the instantiation from FwdParams::elem.
enum class Elem : uint8_t { kBf16 = 0, kF16 = 1 };

struct FwdTile {
  int bm, bn, warps;
};
struct BwdTile {
  int bm, bn, warps;
};
bool head_dim_supported(int D);  // 64, 96 or 128 (the wgmma kernels: 64 and 128 only, attn_fwd_sm90.h)
// The tile `want` names (AttentionPolicy::fwd_tile / bwd_tile: a tuning knob for the benchmarks),
// or the default tile for D when `want` is all zero. An InputError naming the setting when the
// table has no such tile for D.
FwdTile fwd_tile(int D, const FlashTile& want = {});
BwdTile bwd_tile(int D, const FlashTile& want = {});
// Every instantiated tile for D (the tests run each one).
std::vector<FwdTile> fwd_tiles(int D);
std::vector<BwdTile> bwd_tiles(int D);

// stats[t] = {min seg, max seg, min pos, max pos} over tokens [t*tile, min(T, (t+1)*tile)),
// stats: int4 [ceil(T / tile)]. With `runs` (i32 [ceil(T / tile)]), runs[t] = 1 where tile t is one run: a single
// segment whose positions are the first token's plus the offset in the tile (pos[t*tile + i] = min pos + i), else 0;
// the sm_90 kernels then compute the mask of a boundary tile from its index instead of loading seg and pos per
// element.
void launch_tile_stats(int4* stats, const int32_t* seg, const int32_t* pos, int64_t T, int tile, cudaStream_t stream,
                       int32_t* runs = nullptr);

// The forward's parameters, and the part of the backward's they share: BwdParams extends this
// struct (FlashAttention-3's hopper/flash.h), so one function fills it for both entries
// (attention_cuda.cpp). Plain aggregates, passed to the kernels by value.
struct FwdParams {
  const uint16_t* q;  // (Tq, H, D) elem
  const uint16_t* k;  // (Tk, Hkv, D) elem
  const uint16_t* v;  // (Tk, Hkv, D) elem
  void* out;          // (Tq, H, D) elem, or f32 when out_f32; the backward reads it (the FINAL output)
  float* lse;         // (Tq, H); the backward reads it (the FINAL log-sum-exp)
  const int32_t* q_seg;
  const int32_t* q_pos;
  const int32_t* k_seg;
  const int32_t* k_pos;
  const int4* q_stats;  // per query tile (FwdTile::bm rows; BwdTile::bm in the backward)
  const int4* k_stats;  // per key tile (FwdTile::bn rows; BwdTile::bn in the backward)
  int Tq, Tk, H, Hkv, D;
  float scale;
  bool causal;
  int window;  // sliding window (causal only), 0 = none: key tiles wholly before it are skipped
  bool out_f32;
  Elem elem;  // q, k, v (and dout, and the 16-bit outputs): bf16 or f16
};
// Runs the forward kernel of `kernel`'s family (attention_policy.h's FlashKernel) on a device of
// compute capability `cc`; returns the family that ran (kMma or kWgmma). Throws when no kernel is
// instantiated for (D, tile), and an InputError when kWgmma cannot run here.
FlashKernel launch_fwd(const FwdParams& p, const FwdTile& tile, FlashKernel kernel, int cc, cudaStream_t stream);

// The backward's parameters: the forward's (out and lse read, not written) and the gradients.
struct BwdParams : FwdParams {
  const uint16_t* dout;  // (Tq, H, D) elem
  void* dq;              // (Tq, H, D) += (= when write_grads); elem, or f32 when grad_f32
  void* dk;              // (Tk, Hkv, D) += (=)
  void* dv;              // (Tk, Hkv, D) += (=)
  // Workspace (device): dq_acc f32 (Tq, H, D); lse2 and delta f32 (H, Tq_pad) with Tq_pad =
  // ceil(Tq / bm) * bm for the kernel that runs: the mma.sync tile's bm, or the sm_90 kernel's
  // (attn_bwd_sm90.h: bwd_sm90_bm(D), at most kBwdSm90MaxBm).
  float* dq_acc;
  float* lse2;
  float* delta;
  bool grad_f32;
  // false: dq/dk/dv += (attention.h's GradMode::kAccumulate); true: = (kWrite), every element
  // stored without reading the old value, 0 for rows and keys that see nothing (key tiles no
  // query sees are still visited, to store their zeros).
  bool write_grads;
};
static_assert(std::is_aggregate_v<FwdParams> && std::is_trivially_copyable_v<FwdParams> &&
                  std::is_aggregate_v<BwdParams> && std::is_trivially_copyable_v<BwdParams>,
              "kernel parameters are plain aggregates copied by value");

// Whole backward: pre-pass (delta, lse2, dq_acc = 0), the main kernel, dq (+)= scale * dq_acc.
// The kernel family as for launch_fwd; returns the one that ran.
FlashKernel launch_bwd(const BwdParams& p, const BwdTile& tile, FlashKernel kernel, int cc, cudaStream_t stream);

// The backward's pieces (launch_bwd runs them in this order). Tq_pad = ceil(Tq / bm) * bm. With lane_order (the
// sm_90 kernel's; Tq_pad a multiple of 16) each 16 query rows' lse2 / delta are stored in its lanes' order
// (dev::stats_lane_slot, attn_common.cuh).
void launch_bwd_prep(const BwdParams& p, int Tq_pad, cudaStream_t stream, bool lane_order = false);
// With lane_order (the sm_90 kernel's) dq_acc holds each 8 columns in the order 2t + e at 4e + t (t < 4, e < 2).
void launch_dq_finish(const BwdParams& p, cudaStream_t stream, bool lane_order = false);

// In-place LSE merge over rows (T * H of them), each of D elements; out tensors `elem` (bf16 or
// f16) or f32.
void launch_merge(void* out_acc, float* lse_acc, const void* out_part, const float* lse_part, int64_t rows, int D,
                  bool acc_f32, bool part_f32, Elem elem, cudaStream_t stream);

// The kernel instantiations (attn_fwd_d*.cu, attn_bwd_d*.cu), one per element type and tile;
// launch_fwd / launch_bwd pick one (p.elem must be E).
namespace detail {
template <Elem E, int D, int BM, int BN, int NW, int MINB>
void run_fwd(const FwdParams& p, cudaStream_t stream);
template <Elem E, int D, int BM, int BN, int NW>
void run_bwd_main(const BwdParams& p, cudaStream_t stream);
}  // namespace detail

}  // namespace seqpar::cuda_attn
