// The one table of instantiated flash-attention tile shapes (each for bf16 and f16), the default
// shape per head dim, and the launchers that pick a kernel from it. Tuning history: bench/NOTES.md.
#include <string>

#include "attention/cuda/attn_bwd_sm90.h"
#include "attention/cuda/attn_fwd_sm90.h"
#include "attention/cuda/attn_launch.h"
#include "core/cuda_check.h"
#include "core/error.h"

namespace seqpar::cuda_attn {

namespace {

using FwdRun = void (*)(const FwdParams&, cudaStream_t);
using BwdRun = void (*)(const BwdParams&, cudaStream_t);

// One tile shape of one head dim, instantiated for both element types (run[Elem]).
struct FwdVariant {
  int D;
  FwdTile tile;
  bool is_default;
  FwdRun run[2];  // [Elem::kBf16], [Elem::kF16]
};
struct BwdVariant {
  int D;
  BwdTile tile;
  bool is_default;
  BwdRun run[2];
};
template <int D, int BM, int BN, int NW, int MINB>
constexpr FwdVariant fwd_variant(bool is_default) {
  return {D,
          {BM, BN, NW},
          is_default,
          {detail::run_fwd<Elem::kBf16, D, BM, BN, NW, MINB>, detail::run_fwd<Elem::kF16, D, BM, BN, NW, MINB>}};
}
template <int D, int BM, int BN, int NW>
constexpr BwdVariant bwd_variant(bool is_default) {
  return {D,
          {BM, BN, NW},
          is_default,
          {detail::run_bwd_main<Elem::kBf16, D, BM, BN, NW>, detail::run_bwd_main<Elem::kF16, D, BM, BN, NW>}};
}

// Shared memory per CTA, with W = smem_width(D) (D rounded up to 64: 96 -> 128): forward
// (BM + 2 BN) W 2 bytes; backward (2 BN + 4 BM) W 2 + 2 BN BM + 16 BM.
// Defaults chosen by the H200 measurements in bench/NOTES.md (2026-11-29): forward 128x64x4 for both
// head dims (the other shapes were 3-25% slower), backward 64x128x8 (D=128) and 128x128x8 (D=64).
// D=96 (GPT 30B's head dim): forward 128x64x4 like the others; backward 64x64x4 (105 KiB, two CTAs
// per SM; attn_bwd_d96.cu says why no other) — not yet measured on the H200.
// fwd_variant<D, BM, BN, warps, MINB>(the default tile of its D?), bwd_variant<D, BM, BN, warps>(...);
// one tile a line (clang-format would pack them).
// clang-format off
constexpr FwdVariant kFwd[] = {
    fwd_variant<64, 128, 64, 4, 1>(true),
    fwd_variant<64, 64, 64, 4, 3>(false),
    fwd_variant<64, 128, 128, 8, 1>(false),
    fwd_variant<64, 256, 64, 8, 1>(false),
    fwd_variant<96, 128, 64, 4, 1>(true),
    fwd_variant<96, 64, 64, 4, 3>(false),
    fwd_variant<128, 128, 64, 4, 1>(true),
    fwd_variant<128, 128, 64, 8, 1>(false),
    fwd_variant<128, 64, 64, 4, 3>(false),
    fwd_variant<128, 128, 32, 4, 1>(false),
    fwd_variant<128, 128, 128, 8, 1>(false),
};
constexpr BwdVariant kBwd[] = {
    bwd_variant<64, 64, 64, 4>(false),
    bwd_variant<64, 128, 128, 8>(true),
    bwd_variant<96, 64, 64, 4>(true),
    bwd_variant<128, 64, 128, 8>(true),
    bwd_variant<128, 64, 64, 4>(false),
};
// clang-format on

// The tile `want` names (AttentionPolicy::fwd_tile / bwd_tile), or the default for D when it is
// all zero. `setting` names it in the error when the table has no such tile for D.
template <typename Variant, typename Tile, size_t N>
Tile pick_tile(const Variant (&table)[N], int D, const FlashTile& want, const char* setting) {
  SEQPAR_CHECK(head_dim_supported(D), "flash attention supports head dim 64, 96 or 128, got D={}", D);
  if (!want.is_default()) {
    std::string known;
    for (const Variant& v : table) {
      if (v.D != D) continue;
      if (v.tile.bm == want.bm && v.tile.bn == want.bn && v.tile.warps == want.warps) return v.tile;
      known += fmt::format(" {}x{}x{}", v.tile.bm, v.tile.bn, v.tile.warps);
    }
    SEQPAR_INPUT_CHECK(false, "{}={} is not an instantiated tile for D={}; known:{}", setting, flash_tile_str(want), D,
                       known);
  }
  for (const Variant& v : table)
    if (v.D == D && v.is_default) return v.tile;
  SEQPAR_CHECK(false, "no default tile for D={}", D);
  return {};
}

template <typename Variant, typename Tile, size_t N>
const Variant& find_variant(const Variant (&table)[N], int D, const Tile& tile, const char* what) {
  for (const Variant& v : table)
    if (v.D == D && v.tile.bm == tile.bm && v.tile.bn == tile.bn && v.tile.warps == tile.warps) return v;
  SEQPAR_CHECK(false, "no flash {} kernel for D={} tile {}x{}x{}", what, D, tile.bm, tile.bn, tile.warps);
  return table[0];
}

}  // namespace

bool head_dim_supported(int D) { return D == 64 || D == 96 || D == 128; }

FwdTile fwd_tile(int D, const FlashTile& want) {
  return pick_tile<FwdVariant, FwdTile>(kFwd, D, want, "fwd_tile (SEQPAR_FLASH_FWD_TILE)");
}
BwdTile bwd_tile(int D, const FlashTile& want) {
  return pick_tile<BwdVariant, BwdTile>(kBwd, D, want, "bwd_tile (SEQPAR_FLASH_BWD_TILE)");
}

std::vector<FwdTile> fwd_tiles(int D) {
  std::vector<FwdTile> r;
  for (const FwdVariant& v : kFwd)
    if (v.D == D) r.push_back(v.tile);
  return r;
}

std::vector<BwdTile> bwd_tiles(int D) {
  std::vector<BwdTile> r;
  for (const BwdVariant& v : kBwd)
    if (v.D == D) r.push_back(v.tile);
  return r;
}

FlashKernel launch_fwd(const FwdParams& p, const FwdTile& tile, FlashKernel kernel, int cc, cudaStream_t stream) {
  const FwdVariant& v = find_variant(kFwd, p.D, tile, "forward");
  if (kernel != FlashKernel::kMma) {
    const bool ok = cc == 90 && fwd_sm90_supported(p);
    if (kernel == FlashKernel::kWgmma) {
      SEQPAR_INPUT_CHECK(cc == 90,
                         "fwd_kernel (SEQPAR_FLASH_FWD_KERNEL)=wgmma needs a compute capability 9.0 device; this one "
                         "is {}.{}",
                         cc / 10, cc % 10);
      SEQPAR_INPUT_CHECK(ok,
                         "fwd_kernel (SEQPAR_FLASH_FWD_KERNEL)=wgmma cannot run this call: the sm_90 kernel needs D 64 "
                         "or 128 (D={}; D=96 runs on the mma.sync kernel: fwd_kernel=auto or mma), H a multiple of "
                         "Hkv (H={}, Hkv={}) and 16-byte aligned q, k, v",
                         p.D, p.H, p.Hkv);
    }
    if (ok) {
      launch_fwd_sm90(p, cc, stream);
      return FlashKernel::kWgmma;
    }
  }
  v.run[static_cast<int>(p.elem)](p, stream);
  return FlashKernel::kMma;
}

FlashKernel launch_bwd(const BwdParams& p, const BwdTile& tile, FlashKernel kernel, int cc, cudaStream_t stream) {
  const BwdVariant& v = find_variant(kBwd, p.D, tile, "backward");
  if (p.Tq == 0 || p.H == 0) return FlashKernel::kMma;
  if (kernel != FlashKernel::kMma) {
    const bool ok = cc == 90 && bwd_sm90_supported(p);
    if (kernel == FlashKernel::kWgmma) {
      SEQPAR_INPUT_CHECK(cc == 90,
                         "bwd_kernel (SEQPAR_FLASH_BWD_KERNEL)=wgmma needs a compute capability 9.0 device; this one "
                         "is {}.{}",
                         cc / 10, cc % 10);
      SEQPAR_INPUT_CHECK(ok,
                         "bwd_kernel (SEQPAR_FLASH_BWD_KERNEL)=wgmma cannot run this call: the sm_90 kernel needs D 64 "
                         "or 128 (D={}; D=96 runs on the mma.sync kernel: bwd_kernel=auto or mma), H a multiple of "
                         "Hkv (H={}, Hkv={}) and 16-byte aligned q, k, v, dout, dq and workspace",
                         p.D, p.H, p.Hkv);
    }
    if (ok) {
      // Its query tile is bwd_sm90_bm(D) rows: the workspace (sized for kBwdSm90MaxBm) holds these rows.
      const int bm = bwd_sm90_bm(p.D);
      launch_bwd_prep(p, (p.Tq + bm - 1) / bm * bm, stream, /*lane_order=*/true);
      launch_bwd_main_sm90(p, cc, stream);
      launch_dq_finish(p, stream, /*lane_order=*/true);
      return FlashKernel::kWgmma;
    }
  }
  const int Tq_pad = (p.Tq + tile.bm - 1) / tile.bm * tile.bm;
  launch_bwd_prep(p, Tq_pad, stream);
  v.run[static_cast<int>(p.elem)](p, stream);
  launch_dq_finish(p, stream);
  return FlashKernel::kMma;
}

}  // namespace seqpar::cuda_attn
