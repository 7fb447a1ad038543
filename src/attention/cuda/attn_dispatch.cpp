// The one table of instantiated flash-attention tile shapes, the default shape per head dim, and
// the launchers that pick a kernel from it. Tuning history: bench/NOTES.md.
#include <cstdio>
#include <cstdlib>
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

struct FwdVariant {
  int D;
  FwdTile tile;
  bool is_default;
  FwdRun run;
};
struct BwdVariant {
  int D;
  BwdTile tile;
  bool is_default;
  BwdRun run;
};

// Shared memory per CTA: forward (BM + 2 BN) D 2 bytes; backward (2 BN + 4 BM) D 2 + 2 BN BM + 16 BM.
// Defaults chosen by the H200 measurements in bench/NOTES.md (2026-11-29): forward 128x64x4 for both
// head dims (the other shapes were 3-25% slower), backward 64x128x8 (D=128) and 128x128x8 (D=64).
constexpr FwdVariant kFwd[] = {
    {64, {128, 64, 4}, true, detail::run_fwd<64, 128, 64, 4, 1>},
    {64, {64, 64, 4}, false, detail::run_fwd<64, 64, 64, 4, 3>},
    {64, {128, 128, 8}, false, detail::run_fwd<64, 128, 128, 8, 1>},
    {64, {256, 64, 8}, false, detail::run_fwd<64, 256, 64, 8, 1>},
    {128, {128, 64, 4}, true, detail::run_fwd<128, 128, 64, 4, 1>},
    {128, {128, 64, 8}, false, detail::run_fwd<128, 128, 64, 8, 1>},
    {128, {64, 64, 4}, false, detail::run_fwd<128, 64, 64, 4, 3>},
    {128, {128, 32, 4}, false, detail::run_fwd<128, 128, 32, 4, 1>},
    {128, {128, 128, 8}, false, detail::run_fwd<128, 128, 128, 8, 1>},
};
constexpr BwdVariant kBwd[] = {
    {64, {64, 64, 4}, false, detail::run_bwd_main<64, 64, 64, 4>},
    {64, {128, 128, 8}, true, detail::run_bwd_main<64, 128, 128, 8>},
    {128, {64, 128, 8}, true, detail::run_bwd_main<128, 64, 128, 8>},
    {128, {64, 64, 4}, false, detail::run_bwd_main<128, 64, 64, 4>},
};

// "BMxBNxWARPS" -> {bm, bn, warps}; false when malformed.
bool parse_tile(const char* s, int& bm, int& bn, int& warps) {
  char tail = 0;
  return std::sscanf(s, "%dx%dx%d%c", &bm, &bn, &warps, &tail) == 3;
}

template <typename Variant, typename Tile, size_t N>
Tile pick_tile(const Variant (&table)[N], int D, const char* env_name) {
  SEQPAR_CHECK(head_dim_supported(D), "flash attention supports head dim 64 or 128, got D={}", D);
  if (const char* env = std::getenv(env_name); env && *env) {
    int bm = 0, bn = 0, warps = 0;
    SEQPAR_INPUT_CHECK(parse_tile(env, bm, bn, warps), "{}={} must read BMxBNxWARPS, e.g. 128x64x4", env_name, env);
    std::string known;
    for (const Variant& v : table) {
      if (v.D != D) continue;
      if (v.tile.bm == bm && v.tile.bn == bn && v.tile.warps == warps) return v.tile;
      known += fmt::format(" {}x{}x{}", v.tile.bm, v.tile.bn, v.tile.warps);
    }
    SEQPAR_INPUT_CHECK(false, "{}={} is not an instantiated tile for D={}; known:{}", env_name, env, D, known);
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

// The forward kernel family, from SEQPAR_FLASH_FWD_KERNEL: auto (unset or empty: the Hopper wgmma
// kernel on compute capability 9.0 when fwd_sm90_supported, else the mma.sync kernel), mma
// (always the mma.sync kernel of the tile table) or wgmma (the Hopper kernel; an error where it
// cannot run).
enum class FwdKernel { kAuto, kMma, kWgmma };

FwdKernel fwd_kernel_choice() {
  const char* env = std::getenv("SEQPAR_FLASH_FWD_KERNEL");
  if (!env || !*env) return FwdKernel::kAuto;
  const std::string s(env);
  if (s == "auto") return FwdKernel::kAuto;
  if (s == "mma") return FwdKernel::kMma;
  if (s == "wgmma") return FwdKernel::kWgmma;
  SEQPAR_INPUT_CHECK(false, "SEQPAR_FLASH_FWD_KERNEL={} must be auto, mma or wgmma", s);
  return FwdKernel::kAuto;
}

// The backward main kernel family, from SEQPAR_FLASH_BWD_KERNEL, the same choices: auto (unset or
// empty: the Hopper wgmma kernel on compute capability 9.0 when bwd_sm90_supported, else the
// mma.sync kernel), mma or wgmma (an error where it cannot run).
enum class BwdKernel { kAuto, kMma, kWgmma };

BwdKernel bwd_kernel_choice() {
  const char* env = std::getenv("SEQPAR_FLASH_BWD_KERNEL");
  if (!env || !*env) return BwdKernel::kAuto;
  const std::string s(env);
  if (s == "auto") return BwdKernel::kAuto;
  if (s == "mma") return BwdKernel::kMma;
  if (s == "wgmma") return BwdKernel::kWgmma;
  SEQPAR_INPUT_CHECK(false, "SEQPAR_FLASH_BWD_KERNEL={} must be auto, mma or wgmma", s);
  return BwdKernel::kAuto;
}

// Compute capability of the current device as major * 10 + minor.
int current_device_cc() {
  int dev = 0, major = 0, minor = 0;
  SEQPAR_CUDA_CHECK(cudaGetDevice(&dev));
  SEQPAR_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  SEQPAR_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  return major * 10 + minor;
}

}  // namespace

bool head_dim_supported(int D) { return D == 64 || D == 128; }

FwdTile fwd_tile(int D) { return pick_tile<FwdVariant, FwdTile>(kFwd, D, "SEQPAR_FLASH_FWD_TILE"); }
BwdTile bwd_tile(int D) { return pick_tile<BwdVariant, BwdTile>(kBwd, D, "SEQPAR_FLASH_BWD_TILE"); }

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

void launch_fwd(const FwdParams& p, const FwdTile& tile, cudaStream_t stream) {
  const FwdVariant& v = find_variant(kFwd, p.D, tile, "forward");
  const FwdKernel kind = fwd_kernel_choice();
  if (kind != FwdKernel::kMma) {
    const int cc = current_device_cc();
    const bool ok = cc == 90 && fwd_sm90_supported(p);
    if (kind == FwdKernel::kWgmma) {
      SEQPAR_INPUT_CHECK(cc == 90,
                         "SEQPAR_FLASH_FWD_KERNEL=wgmma needs a compute capability 9.0 device; this one is {}.{}",
                         cc / 10, cc % 10);
      SEQPAR_INPUT_CHECK(ok,
                         "SEQPAR_FLASH_FWD_KERNEL=wgmma cannot run this call: the sm_90 kernel needs D 64 or 128 "
                         "(D={}), H a multiple of Hkv (H={}, Hkv={}) and 16-byte aligned q, k, v",
                         p.D, p.H, p.Hkv);
    }
    if (ok) {
      launch_fwd_sm90(p, stream);
      return;
    }
  }
  v.run(p, stream);
}

void launch_bwd(const BwdParams& p, const BwdTile& tile, cudaStream_t stream) {
  const BwdVariant& v = find_variant(kBwd, p.D, tile, "backward");
  if (p.Tq == 0 || p.H == 0) return;
  if (const BwdKernel kind = bwd_kernel_choice(); kind != BwdKernel::kMma) {
    const int cc = current_device_cc();
    const bool ok = cc == 90 && bwd_sm90_supported(p);
    if (kind == BwdKernel::kWgmma) {
      SEQPAR_INPUT_CHECK(cc == 90,
                         "SEQPAR_FLASH_BWD_KERNEL=wgmma needs a compute capability 9.0 device; this one is {}.{}",
                         cc / 10, cc % 10);
      SEQPAR_INPUT_CHECK(ok,
                         "SEQPAR_FLASH_BWD_KERNEL=wgmma cannot run this call: the sm_90 kernel needs D 64 or 128 "
                         "(D={}), H a multiple of Hkv (H={}, Hkv={}) and 16-byte aligned q, k, v, dout and workspace",
                         p.D, p.H, p.Hkv);
    }
    if (ok) {
      // Its query tile is 64 rows: the workspace (sized for tile.bm >= 64) holds these rows.
      launch_bwd_prep(p, (p.Tq + kBwdSm90Bm - 1) / kBwdSm90Bm * kBwdSm90Bm, stream);
      launch_bwd_main_sm90(p, stream);
      launch_dq_finish(p, stream);
      return;
    }
  }
  const int Tq_pad = (p.Tq + tile.bm - 1) / tile.bm * tile.bm;
  launch_bwd_prep(p, Tq_pad, stream);
  v.run(p, stream);
  launch_dq_finish(p, stream);
}

}  // namespace seqpar::cuda_attn
