// Which kernels run attention: a value the caller holds and hands to every call (AttnArgs::policy,
// LocalAttention, make_sp_attention), never a process-wide setting. CPU-only code (no CUDA types),
// so configuration code and tests build it everywhere; attention/cuda/ acts on it, the CPU path
// ignores it (the CPU has one attention). The default is what seqpar runs when nobody chose:
// the flash kernel, its kernel family picked per device, the per-head-dim default tiles.
//
// `seqpar` fills one from the environment at start-up (cli/kernel_env.h, docs/kernel-policy.md).
#pragma once

#include <string>

namespace seqpar {

// Which implementation runs attention on a CUDA device (attention_backend.h has the rules):
//   kFlash  seqpar's own kernel: every mask attention.h can express.
//   kCudnn  cuDNN's fused SDPA for every call it computes exactly (packed_docs), flash otherwise.
//   kAuto   kCudnn on compute capability >= 9.0, kFlash elsewhere.
enum class AttentionBackend { kFlash, kCudnn, kAuto };

// The flash kernel family of one direction:
//   kAuto   the Hopper wgmma kernel on compute capability 9.0 when it supports the call, else mma;
//   kMma    always the mma.sync kernel of the tile table;
//   kWgmma  the Hopper kernel; an InputError where it cannot run (another device, an unsupported call).
enum class FlashKernel { kAuto, kMma, kWgmma };

// A flash tile override "BMxBNxWARPS" (attention/cuda/attn_launch.h): all zero means the default
// tile for the head dim. A non-zero tile must be one the tile table instantiates for the call's D
// (checked at the call: an InputError listing the instantiated ones). It shapes the mma.sync kernel
// only (the wgmma kernels have one shape each).
struct FlashTile {
  int bm = 0, bn = 0, warps = 0;
  bool is_default() const { return bm == 0 && bn == 0 && warps == 0; }
  bool operator==(const FlashTile&) const = default;
};

// Whether cuDNN runs a batch of ONE document through its dense graph (kOn, the default: what
// PyTorch's SDPA builds) or, like several documents, through the ragged graph (kOff).
enum class CudnnDense { kOn, kOff };

struct AttentionPolicy {
  AttentionBackend backend = AttentionBackend::kFlash;
  FlashKernel fwd_kernel = FlashKernel::kAuto;
  FlashKernel bwd_kernel = FlashKernel::kAuto;
  FlashTile fwd_tile;  // forward: BM query rows per CTA, BN keys per step, warps
  FlashTile bwd_tile;  // backward: BN keys per CTA, BM queries per step, warps
  CudnnDense cudnn_dense = CudnnDense::kOn;
  bool operator==(const AttentionPolicy&) const = default;
};

// Which implementation computed one attention call: attn_forward / attn_backward store it in
// *AttnArgs::ran when the caller asks (tests and `seqpar bench attention` check that the path
// they chose really ran, not a fallback).
enum class AttnPath { kNone, kCpu, kFlashMma, kFlashWgmma, kCudnnRagged, kCudnnDense };

// Names and parsers. Each parser throws an InputError naming `setting`, the value and the rule
// (the setting is the name the value came from, e.g. an environment variable).
const char* flash_kernel_name(FlashKernel kernel);  // "auto" | "mma" | "wgmma"
FlashKernel parse_flash_kernel(const std::string& value, const std::string& setting);
std::string flash_tile_str(const FlashTile& tile);  // "128x64x4", "default"
// "BMxBNxWARPS" with positive whole numbers, e.g. "128x64x4".
FlashTile parse_flash_tile(const std::string& value, const std::string& setting);
// "1" kOn, "0" kOff.
CudnnDense parse_cudnn_dense(const std::string& value, const std::string& setting);
const char* attn_path_name(
    AttnPath path);  // "none" | "cpu" | "flash-mma" | "flash-wgmma" | "cudnn-ragged" | "cudnn-dense"

}  // namespace seqpar
