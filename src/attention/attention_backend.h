// Which implementation runs attention on a CUDA device, and the rule that decides when cuDNN's
// fused attention can stand in for seqpar's own flash kernel. CPU-only code (no CUDA), so the
// parsing and the layout rule are tested everywhere; attention/cuda/ acts on them.
//
// Backends (AttentionPolicy::backend, attention_policy.h, handed to every call in AttnArgs):
//   flash  seqpar's own kernel (attention/cuda/attn_*.cu): every mask attention.h can express.
//   cudnn  cuDNN's fused SDPA (graph API) for every call it computes exactly (packed_docs below),
//          the flash kernel for the others (said at debug log level).
//   auto   cudnn on Hopper and newer (compute capability >= 9.0) for the calls its dense graph
//          computes (one document: 1.3-2.0x the flash kernel forward
//          +backward on the H200, bench/NOTES.md 2026-12-02), flash for every other call.
//          What sdpa, the default attn_implementation, runs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "attention/attention.h"

namespace seqpar {

// "flash" | "cudnn" | "auto"; anything else is an InputError naming the value and the choices.
AttentionBackend parse_attention_backend(const std::string& name);
const char* attention_backend_name(AttentionBackend backend);

// Hugging Face's `attn_implementation` (config.json, from_pretrained, Accelerate's
// parallelism_config sp_attn_implementation) to a backend:
//   sdpa                                   -> auto (PyTorch's SDPA picks cuDNN on Hopper: cuDNN
//                                             where it is exact and measured faster, flash else)
//   flash_attention_2, flash_attention_3   -> flash
//   eager                                  -> InputError: eager materialises the [S, S] scores
// and anything else is an InputError listing the accepted names.
AttentionBackend parse_attn_implementation(const std::string& name);

// The attn_implementation names seqpar takes, as a closed set (TrainConfig's setting).
enum class AttnImplementation { kSdpa, kFlashAttention2, kFlashAttention3 };
// The name's value; InputError for eager and any other name, as parse_attn_implementation.
AttnImplementation attn_implementation_of(const std::string& name);
const char* attn_implementation_name(AttnImplementation impl);
// auto for sdpa, flash for flash_attention_2 / flash_attention_3.
AttentionBackend attention_backend_for(AttnImplementation impl);

// The head dims the CUDA attention takes (every backend: 64, 96 and 128; D = 96 runs on the mma.sync
// flash kernel, also on Hopper), and their text for messages. The CPU attention takes any.
bool cuda_attention_head_dim(int64_t head_dim);
inline constexpr const char* kCudaAttentionHeadDims = "64, 96 or 128";

// Documents of one packed token stream: document d covers tokens [cu[d], cu[d+1]).
struct PackedDocs {
  std::vector<int32_t> cu;  // [B + 1], cu[0] = 0, cu[B] = T
  int32_t max_len = 0;      // longest document
  int64_t num_docs() const { return static_cast<int64_t>(cu.size()) - 1; }
};

// The packed-document layout for which cuDNN's SDPA (padding mask over ragged offsets, optionally
// its top-left causal mask, i.e. key index <= query index inside each document) is EXACTLY the
// attention.h rule "seg_q == seg_k and (not causal or pos_k <= pos_q)". That holds when:
//   - no sliding window (AttnArgs::window == 0): windowed calls run on the flash kernel;
//   - queries and keys are the same token set: Tq == Tk and identical seg/pos (what
//     LocalAttention sees, and Ulysses after its all-to-all);
//   - seg is non-decreasing, so each document is one contiguous run of tokens;
//   - when causal, pos strictly increases inside each run, so pos order is index order (pos need
//     not be consecutive, nor start at 0).
// The metadata must be host tensors (i32). Otherwise returns nullopt and, when `why` is given,
// sets it to the first rule that failed.
std::optional<PackedDocs> packed_docs(const AttnArgs& args, int64_t Tq, int64_t Tk, std::string* why = nullptr);

}  // namespace seqpar
