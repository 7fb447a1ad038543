// Which implementation runs attention on a CUDA device, and the rule that decides when cuDNN's
// fused attention can stand in for seqpar's own flash kernel. CPU-only code (no CUDA), so the
// parsing and the layout rule are tested everywhere; attention/cuda/ acts on them.
//
// Backends (AttentionPolicy::backend, attention_policy.h, handed to every call in AttnArgs):
//   flash  seqpar's own kernel (attention/cuda/attn_*.cu): every mask attention.h can express.
//   cudnn  cuDNN's fused SDPA (graph API) for every call it computes exactly (packed_docs below),
//          the flash kernel for the others (said at debug log level).
//   auto   cudnn on Hopper and newer (compute capability >= 9.0) for the calls its dense graph
//          computes (one document), except the directions auto_runs_own_kernel names, where seqpar's
//          sm_90 kernel was measured faster; flash for every other call. Chosen per call and per
//          direction (docs/kernel-policy.md). What sdpa, the default attn_implementation, runs.
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

// auto takes cuDNN's dense graph from this compute capability on (Hopper), the flash kernel below it.
inline constexpr int kAutoCudnnMinComputeCapability = 90;

// Which pass of attention a rule is about.
enum class AttnDirection { kForward, kBackward };

// From this many tokens (one causal document) auto_runs_own_kernel may pick seqpar's sm_90 kernel: the
// shortest length at which it was measured faster than cuDNN (bench/NOTES.md, twenty-ninth session).
inline constexpr int64_t kAutoOwnKernelMinTokens = 16384;

// Whether `auto` runs seqpar's own sm_90 kernel instead of cuDNN's dense graph for one direction of a
// call cuDNN's dense graph computes exactly (one document of `tokens` queries and keys, no window): the
// forward at head dim 128 and the backward at head dim 64, causal, from kAutoOwnKernelMinTokens tokens,
// on compute capability 9.0 (where the sm_90 kernels run). Those are the directions measured faster
// than cuDNN's on an H100 (forward D 128: 1.03-1.08x; backward D 64: 1.00-1.09x; 16K and 64K tokens,
// H 32 and 16 over 8 KV heads); every other direction and shape stays on cuDNN. Both backends write and
// read the same out / lse contract (attention.h), so a forward of one and a backward of the other pair.
bool auto_runs_own_kernel(AttnDirection dir, int64_t head_dim, int64_t tokens, bool causal, int compute_capability);

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
