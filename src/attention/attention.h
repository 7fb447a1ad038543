// Local attention (one device, no communication) and the interface the model calls.
//
// Masking: every token carries a segment (document) id and a position in the packed sequence.
// Query i sees key j iff seg_q[i] == seg_k[j] and (not causal or pos_k[j] <= pos_q[i]), and, with
// a sliding window W > 0 (causal only), pos_q[i] - pos_k[j] < W: a query sees itself and the
// W - 1 positions before it (transformers' sliding_window_overlay: kv_idx > q_idx - W).
// This one rule covers a single causal sequence, varlen/packed batches (cu_seqlens), and every
// sequence-parallel layout (contiguous, zigzag, a ring step between two ranks' blocks), because
// the metadata travels with the tokens. Padding tokens get a segment of their own.
//
// Numerics: softmax statistics and the log-sum-exp are f32 (f64 inside the CPU reference's
// accumulations is allowed). A query row that sees no key gets out = 0 and lse = -inf; the merge
// and the backward treat such rows as empty, never as NaN.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "attention/attention_policy.h"
#include "core/tensor.h"

namespace seqpar {

// Mask metadata for a set of tokens: seg and pos, i32 [T] each (host tensors on the CPU path).
//
// A TokenMeta is immutable once built: the CUDA backend keeps device copies of seg and pos and
// their per-tile statistics in `cache` on first use (shared by every copy of this TokenMeta, so a
// layer's calls, its recompute and its backward upload nothing again), or ahead of the first call
// with prepare_token_meta.
struct TokenMetaCache {
  std::mutex mu;
  std::map<std::string, Tensor> entries;  // e.g. "seg@cuda:0", "stats64@cuda:0"
};
struct TokenMeta {
  Tensor seg;
  Tensor pos;
  std::shared_ptr<TokenMetaCache> cache = std::make_shared<TokenMetaCache>();
  int64_t size() const { return seg.numel(); }
  // Tokens [begin, end) of this set.
  TokenMeta rows(int64_t begin, int64_t end) const { return {seg.rows(begin, end), pos.rows(begin, end)}; }
};

// Metadata for a packed batch described by cu_seqlens (i32, [num_docs + 1], cu[0] = 0):
// document d covers tokens [cu[d], cu[d+1]), pos = token index in the packed sequence.
TokenMeta token_meta_from_cu_seqlens(const std::vector<int32_t>& cu_seqlens);
// Concatenation of several token sets (e.g. what an all-to-all gathers).
TokenMeta concat_token_meta(const std::vector<TokenMeta>& parts);
// Copies `meta` to `device` ahead of the first attention call that reads it there (the upload of
// host memory makes the host wait for the device; done before a step's forward it costs nothing).
// Nothing on the CPU or when the metadata is on the device already.
void prepare_token_meta(const TokenMeta& meta, Device device);

struct AttnArgs {
  TokenMeta q_meta;  // [Tq]
  TokenMeta k_meta;  // [Tk]
  bool causal = true;
  float scale = 0.f;  // softmax scale, normally 1/sqrt(D)
  // Which kernels a CUDA call runs (attention_policy.h); the CPU has one attention.
  AttentionPolicy policy = {};
  // When set, the call stores which implementation computed it (a fallback included).
  AttnPath* ran = nullptr;
  // Sliding window W: > 0 also masks keys with pos_q - pos_k >= W (needs causal); 0 = none. A
  // per-call value: a model's layers may differ (Qwen2's max_window_layers).
  int32_t window = 0;
};

// out [Tq, H, D] (=), lse f32 [Tq, H] (=). q [Tq, H, D], k/v [Tk, Hkv, D], H % Hkv == 0 (GQA:
// query head h reads KV head h / (H / Hkv)).
void attn_forward(Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v, const AttnArgs& args);

// How attn_backward stores the gradients it computes.
enum class GradMode {
  // dq += , dk += , dv += : a ring sums the contributions of every key block into one buffer.
  kAccumulate,
  // dq = , dk = , dv = : every element is written, rows and keys that see nothing get 0, and the
  // buffers' previous contents (even NaN) are never read. What a caller with a single key block
  // wants (LocalAttention, a ring's first block): no zero-fill beforehand, and the CUDA backends
  // skip their read-add passes.
  kWrite,
};

// out and lse are the FINAL output and log-sum-exp of each query row over all keys (after any
// merge), which makes the backward of one key block exact on its own. dq [Tq, H, D], dk/dv
// [Tk, Hkv, D], stored as `mode` says (accumulated by default).
void attn_backward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout, const Tensor& q, const Tensor& k,
                   const Tensor& v, const Tensor& out, const Tensor& lse, const AttnArgs& args,
                   GradMode mode = GradMode::kAccumulate);

// Merges a partial result into an accumulator, in place, by log-sum-exp:
//   lse' = log(exp(lse_acc) + exp(lse_part)),
//   out' = out_acc * exp(lse_acc - lse') + out_part * exp(lse_part - lse').
// out_* [T, H, D], lse_* f32 [T, H]. -inf rows are handled (an empty part changes nothing).
void attn_merge(Tensor& out_acc, Tensor& lse_acc, const Tensor& out_part, const Tensor& lse_part);

// ---- the interface the model calls -----------------------------------------------------
// Whatever an implementation saves between forward and backward (in its own layout).
class AttentionContext {
 public:
  virtual ~AttentionContext() = default;
};

// The model hands over this rank's q, k, v (after RoPE) and gets this rank's output; how the
// sequence is split across ranks (and what crosses the wire) is the implementation's business.
class Attention {
 public:
  virtual ~Attention() = default;
  // q [T, H, D], k/v [T, Hkv, D]; out [T, H, D] (=). `window`: the layer's sliding window
  // (AttnArgs::window; 0 = full causal). Returns what backward needs (the window included).
  virtual std::unique_ptr<AttentionContext> forward(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
                                                    float scale, int32_t window = 0) = 0;
  // dq [T, H, D], dk/dv [T, Hkv, D] (=).
  virtual void backward(AttentionContext& ctx, const Tensor& dout, Tensor& dq, Tensor& dk, Tensor& dv) = 0;
  // For a caller that keeps a context from forward to backward and can make forward's q, k, v
  // again more cheaply than their memory is worth (a checkpointed layer keeping its attention: the
  // projections are O(tokens), attention O(tokens^2)): release_inputs drops the context's hold on
  // them and says whether it did; restore_inputs hands back the same values before backward. An
  // implementation that keeps them in a layout of its own (sequence parallelism's gathered heads)
  // drops nothing and returns false.
  virtual bool release_inputs(AttentionContext& /*ctx*/) { return false; }
  virtual void restore_inputs(AttentionContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v);
  // Moves what the calls will read on `device` there ahead of them (prepare_token_meta).
  virtual void prepare(Device device) = 0;
};

// Attention over the tokens one device holds, with the given mask metadata (causal), running the
// kernels `policy` chooses.
class LocalAttention final : public Attention {
 public:
  explicit LocalAttention(TokenMeta meta, AttentionPolicy policy = {}, bool causal = true)
      : meta_(std::move(meta)), policy_(policy), causal_(causal) {}
  std::unique_ptr<AttentionContext> forward(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
                                            float scale, int32_t window = 0) override;
  void backward(AttentionContext& ctx, const Tensor& dout, Tensor& dq, Tensor& dk, Tensor& dv) override;
  bool release_inputs(AttentionContext& ctx) override;
  void restore_inputs(AttentionContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v) override;
  void prepare(Device device) override { prepare_token_meta(meta_, device); }

 private:
  TokenMeta meta_;
  AttentionPolicy policy_;
  bool causal_;
};

}  // namespace seqpar
