// Backend names (attention_backend.h) and the rule for handing a call to cuDNN's SDPA.
#include "attention/attention_backend.h"

#include <algorithm>
#include <climits>

#include "core/error.h"

namespace seqpar {

AttentionBackend parse_attention_backend(const std::string& name) {
  if (name == "flash") return AttentionBackend::kFlash;
  if (name == "cudnn") return AttentionBackend::kCudnn;
  if (name == "auto") return AttentionBackend::kAuto;
  throw InputError(fmt::format("attention backend '{}' is not one of flash, cudnn, auto", name));
}

const char* attention_backend_name(AttentionBackend backend) {
  switch (backend) {
    case AttentionBackend::kFlash:
      return "flash";
    case AttentionBackend::kCudnn:
      return "cudnn";
    case AttentionBackend::kAuto:
      return "auto";
  }
  return "?";
}

AttentionBackend parse_attn_implementation(const std::string& name) {
  return attention_backend_for(attn_implementation_of(name));
}

AttentionBackend attention_backend_for(AttnImplementation impl) {
  return impl == AttnImplementation::kSdpa ? AttentionBackend::kAuto : AttentionBackend::kFlash;
}

const char* attn_implementation_name(AttnImplementation impl) {
  switch (impl) {
    case AttnImplementation::kSdpa:
      return "sdpa";
    case AttnImplementation::kFlashAttention2:
      return "flash_attention_2";
    case AttnImplementation::kFlashAttention3:
      return "flash_attention_3";
  }
  return "?";
}

AttnImplementation attn_implementation_of(const std::string& name) {
  if (name == "sdpa") return AttnImplementation::kSdpa;
  if (name == "flash_attention_2") return AttnImplementation::kFlashAttention2;
  if (name == "flash_attention_3") return AttnImplementation::kFlashAttention3;
  if (name == "eager") {
    throw InputError(
        "attn_implementation='eager' is not supported: eager attention materialises the [S, S] score matrix per "
        "head, which is what seqpar exists to avoid at long sequence lengths; use sdpa (cuDNN fused attention) or "
        "flash_attention_2 / flash_attention_3 (seqpar's flash kernel)");
  }
  throw InputError(
      fmt::format("attn_implementation='{}' is not supported; use sdpa, flash_attention_2 or flash_attention_3", name));
}

namespace {

// The host i32 array of a metadata tensor, or nullptr (with `why` set) when it is not one.
const int32_t* host_i32(const Tensor& t, int64_t n, const char* name, std::string* why) {
  if (!t.defined() || t.dtype() != DType::kI32 || t.ndim() != 1 || t.numel() != n) {
    if (why) *why = fmt::format("{} is not i32 [{}]", name, n);
    return nullptr;
  }
  if (!t.device().is_cpu()) {
    if (why) *why = fmt::format("{} is on {} (the layout is read on the host)", name, t.device().str());
    return nullptr;
  }
  return t.data<int32_t>();
}

}  // namespace

std::optional<PackedDocs> packed_docs(const AttnArgs& args, int64_t Tq, int64_t Tk, std::string* why) {
  if (args.window > 0) {
    // cuDNN's sliding-window / band masks count token indices within a document, seqpar's window
    // counts positions; and no GPU run has shown them exact here. The flash kernel takes the call.
    if (why) *why = fmt::format("a sliding window (window={}) is set; cuDNN's band mask is not used", args.window);
    return std::nullopt;
  }
  if (Tq != Tk) {
    if (why) *why = fmt::format("Tq={} != Tk={}: queries and keys are different token sets", Tq, Tk);
    return std::nullopt;
  }
  const int64_t T = Tq;
  if (T <= 0 || T > INT32_MAX) {
    if (why) *why = fmt::format("T={} tokens is outside [1, 2^31)", T);
    return std::nullopt;
  }
  const int32_t* qs = host_i32(args.q_meta.seg, T, "q_meta.seg", why);
  if (qs == nullptr) return std::nullopt;
  const int32_t* qp = host_i32(args.q_meta.pos, T, "q_meta.pos", why);
  if (qp == nullptr) return std::nullopt;
  const int32_t* ks = host_i32(args.k_meta.seg, T, "k_meta.seg", why);
  if (ks == nullptr) return std::nullopt;
  const int32_t* kp = host_i32(args.k_meta.pos, T, "k_meta.pos", why);
  if (kp == nullptr) return std::nullopt;
  // Same token set: usually the very same tensors (LocalAttention passes one TokenMeta twice).
  if ((qs != ks && !std::equal(qs, qs + T, ks)) || (qp != kp && !std::equal(qp, qp + T, kp))) {
    if (why) *why = "q_meta and k_meta differ: queries and keys are different token sets";
    return std::nullopt;
  }
  PackedDocs docs;
  docs.cu.push_back(0);
  for (int64_t t = 1; t <= T; ++t) {
    const bool boundary = t == T || qs[t] != qs[t - 1];
    if (t < T && qs[t] < qs[t - 1]) {
      if (why)
        *why = fmt::format("seg decreases at token {} ({} after {}): a document is not one run", t, qs[t], qs[t - 1]);
      return std::nullopt;
    }
    if (t < T && !boundary && args.causal && qp[t] <= qp[t - 1]) {
      if (why)
        *why = fmt::format("pos does not increase at token {} ({} after {}) inside document {}", t, qp[t], qp[t - 1],
                           qs[t]);
      return std::nullopt;
    }
    if (boundary) {
      docs.cu.push_back(static_cast<int32_t>(t));
      docs.max_len = std::max(docs.max_len, static_cast<int32_t>(t - docs.cu[docs.cu.size() - 2]));
    }
  }
  return docs;
}

bool auto_runs_own_kernel(AttnDirection dir, int64_t head_dim, int64_t tokens, bool causal, int compute_capability) {
  if (compute_capability != 90 || !causal || tokens < kAutoOwnKernelMinTokens) return false;
  return dir == AttnDirection::kForward ? head_dim == 128 : head_dim == 64;
}

bool cuda_attention_head_dim(int64_t head_dim) { return head_dim == 64 || head_dim == 96 || head_dim == 128; }

}  // namespace seqpar
