// Names and parsers of attention_policy.h.
#include "attention/attention_policy.h"

#include <fmt/format.h>

#include <charconv>

#include "core/error.h"

namespace seqpar {

const char* flash_kernel_name(FlashKernel kernel) {
  switch (kernel) {
    case FlashKernel::kAuto:
      return "auto";
    case FlashKernel::kMma:
      return "mma";
    case FlashKernel::kWgmma:
      return "wgmma";
  }
  return "?";
}

FlashKernel parse_flash_kernel(const std::string& value, const std::string& setting) {
  if (value == "auto") return FlashKernel::kAuto;
  if (value == "mma") return FlashKernel::kMma;
  if (value == "wgmma") return FlashKernel::kWgmma;
  SEQPAR_INPUT_CHECK(false, "{}={} must be auto, mma or wgmma", setting, value);
  return FlashKernel::kAuto;
}

std::string flash_tile_str(const FlashTile& tile) {
  if (tile.is_default()) return "default";
  return fmt::format("{}x{}x{}", tile.bm, tile.bn, tile.warps);
}

FlashTile parse_flash_tile(const std::string& value, const std::string& setting) {
  // Three positive whole numbers separated by 'x', nothing else.
  int parts[3] = {0, 0, 0};
  const char* at = value.data();
  const char* end = value.data() + value.size();
  bool ok = true;
  for (int i = 0; i < 3 && ok; ++i) {
    const auto [next, ec] = std::from_chars(at, end, parts[i]);
    ok = ec == std::errc() && next != at && parts[i] > 0;
    at = next;
    if (ok && i < 2) ok = at != end && *at++ == 'x';
  }
  SEQPAR_INPUT_CHECK(ok && at == end, "{}={} must read BMxBNxWARPS, e.g. 128x64x4", setting, value);
  return {parts[0], parts[1], parts[2]};
}

CudnnDense parse_cudnn_dense(const std::string& value, const std::string& setting) {
  SEQPAR_INPUT_CHECK(value == "0" || value == "1",
                     "{}={} must be 0 (ragged cuDNN graphs only) or 1 (a dense graph for a batch of one sequence, "
                     "the default)",
                     setting, value);
  return value == "1" ? CudnnDense::kOn : CudnnDense::kOff;
}

const char* attn_path_name(AttnPath path) {
  switch (path) {
    case AttnPath::kNone:
      return "none";
    case AttnPath::kCpu:
      return "cpu";
    case AttnPath::kFlashMma:
      return "flash-mma";
    case AttnPath::kFlashWgmma:
      return "flash-wgmma";
    case AttnPath::kCudnnRagged:
      return "cudnn-ragged";
    case AttnPath::kCudnnDense:
      return "cudnn-dense";
  }
  return "?";
}

}  // namespace seqpar
