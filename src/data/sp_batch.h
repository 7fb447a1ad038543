// Sequence-parallel batches: from a batch of token sequences to each SP rank's shard.
//
// One path for fixed, variable-length and packed batches (docs/ARCHITECTURE.md, "Data flow of one
// training step", step 1):
//   1. labels are shifted on each WHOLE row, before any cut: target[i] = labels[i+1], and -100 on
//      the last token of every document (a row is one document unless doc_lens splits it), so no
//      token ever predicts across a document or row boundary;
//   2. the rows are folded into one token stream, row after row; every document is a segment of
//      its own and its position_ids (RoPE positions) restart at 0;
//   3. the stream is padded at its end to a multiple of P (contiguous) or 2P (zigzag) with pad
//      tokens: input id = pad_id, target -100, one extra segment of their own, position_ids 0..;
//   4. the padded stream of S tokens is cut per the layout:
//        contiguous: rank r holds tokens [r*S/P, (r+1)*S/P)
//        zigzag:     the stream in 2P chunks of S/(2P); rank r holds chunk r, then chunk 2P-1-r
//      (zigzag balances causal attention work across the ring: see attention_work).
//
// Every shard carries seg and pos, the mask metadata of attention/attention.h: query i sees key j
// iff seg[i] == seg[j] and pos[j] <= pos[i], where pos is the token's index in the padded stream.
// The metadata travels with the tokens, so any exchange (all-to-all, ring step) keeps the mask.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "attention/attention.h"
#include "core/error.h"
#include "core/tensor.h"
#include "kernels/ops.h"  // kIgnoreIndex: the label the loss ignores (-100)

namespace seqpar {

// One row of a batch. labels follow the HF convention: unshifted (labels[i] is token i's own id
// for pretraining) and -100 = ignore (e.g. SFT prompt tokens).
struct Sequence {
  std::vector<int32_t> input_ids;  // [T_row]
  std::vector<int32_t> labels;     // [T_row]
  std::vector<int32_t> doc_lens;   // lengths of the packed documents, summing to T_row; empty = one document
};

enum class SpLayout { kContiguous, kZigzag };

std::string_view sp_layout_name(SpLayout layout);  // "contiguous", "zigzag"
// Parses "contiguous" / "zigzag"; InputError naming `setting` and the value otherwise.
SpLayout parse_sp_layout(const std::string& name, const std::string& setting = "sp_layout");
// How many tokens the padded stream must be a multiple of: P (contiguous) or 2P (zigzag).
int64_t sp_layout_multiple(SpLayout layout, int sp_size);

// Indices into the padded stream of S tokens that `rank` holds, in the rank's local order
// ([S/P] entries). S must be a multiple of sp_layout_multiple(layout, sp_size).
std::vector<int64_t> sp_layout_indices(int64_t padded_len, int sp_size, SpLayout layout, int rank);

// One rank's tokens, T_r = S / P of them, in the rank's local order.
struct Shard {
  std::vector<int32_t> input_ids;     // [T_r]
  std::vector<int32_t> targets;       // [T_r] shifted labels: the token id to predict, or -100
  std::vector<int32_t> position_ids;  // [T_r] RoPE positions, restarting at 0 per document
  std::vector<int32_t> seg;           // [T_r] segment id: one per document, one for all pads
  std::vector<int32_t> pos;           // [T_r] index of the token in the padded stream
  std::vector<int64_t> global_index;  // [T_r] same index as pos, 64-bit (for gathers and scatters)
  int64_t good_tokens = 0;            // how many targets != -100 (0 is normal: a prompt-only shard)

  int64_t size() const { return static_cast<int64_t>(input_ids.size()); }
};

// All P shards of one global batch.
struct SpBatch {
  SpLayout layout = SpLayout::kContiguous;
  int sp_size = 1;           // P
  int64_t padded_len = 0;    // S, a multiple of sp_layout_multiple(layout, P)
  int64_t unpadded_len = 0;  // tokens of the real rows; the stream's pads are [unpadded_len, S)
  int64_t num_pad = 0;       // S - unpadded_len
  int64_t num_docs = 0;      // documents over all rows (segments 0 .. num_docs-1; pads are num_docs)
  int64_t good_tokens = 0;   // sum over shards
  // 1 + the largest position id of a real token (pads excluded): the longest document. The
  // length transformers' dynamic_rope_update calls seq_len (max(position_ids) + 1 over the batch),
  // by which dynamic and longrope RoPE pick their frequencies; global, so every rank agrees.
  int64_t rope_len = 0;
  std::vector<Shard> shards;  // [P]

  int64_t shard_len() const { return padded_len / sp_size; }  // T_r

  // Puts per-rank rows back in stream order: per_rank[r] holds [T_r, width] values in rank r's
  // local order; returns [S, width] in padded stream order (the pads' rows last).
  template <typename T>
  std::vector<T> gather(const std::vector<std::vector<T>>& per_rank, int64_t width = 1) const;
  // Same for tensors [T_r, ...] of one dtype and trailing shape (any device); returns a host
  // tensor [S, ...].
  Tensor gather(const std::vector<Tensor>& per_rank) const;
  // The inverse: [S, width] rows in stream order -> per rank [T_r, width] in local order.
  template <typename T>
  std::vector<std::vector<T>> scatter(const std::vector<T>& stream, int64_t width = 1) const;
};

// Shifts HF labels for one row: target[i] = labels[i+1], except -100 on the last token of every
// document (doc_lens empty = the row is one document). Checks as make_sp_batch does.
std::vector<int32_t> shift_labels(const std::vector<int32_t>& labels, const std::vector<int32_t>& doc_lens = {});

// The longest document of the rows (a row without doc_lens is one document): 1 + the largest
// position id of a real token (SpBatch::rope_len), what learned positions must hold.
int64_t longest_document(const std::vector<Sequence>& batch);

// Builds every rank's shard. InputError, before any work, for: sp_size < 1, an empty batch, a
// zero-length row, labels and input_ids of different lengths, doc_lens with an entry < 1 or not
// summing to the row length, a padded stream longer than 2^31-1 tokens.
SpBatch make_sp_batch(const std::vector<Sequence>& batch, int sp_size, SpLayout layout, int32_t pad_id = 0);

// Causal attention work of a rank: the number of (query, key) pairs its queries see over the
// whole stream (key in the same segment with pos <= the query's), pads included since they are
// computed like any token. Zigzag makes this equal across ranks for one long causal sequence.
int64_t attention_work(const SpBatch& batch, int rank);

// The shard's mask metadata as host i32 tensors [T_r] (what LocalAttention / parallel/ take).
TokenMeta shard_token_meta(const Shard& shard);

// Local cu_seqlens of a shard: boundaries of its runs of tokens that are consecutive in the
// stream and of one segment ([num_runs + 1], cu[0] = 0, cu[last] = T_r). A zigzag shard splits a
// document that spans both of its chunks into two runs: cu_seqlens alone cannot express that the
// second run sees the first, which is why attention takes seg/pos instead.
std::vector<int32_t> shard_cu_seqlens(const Shard& shard);

// ---- template definitions --------------------------------------------------------------

template <typename T>
std::vector<T> SpBatch::gather(const std::vector<std::vector<T>>& per_rank, int64_t width) const {
  SEQPAR_CHECK(width >= 1, "gather: width={} must be >= 1", width);
  SEQPAR_CHECK_EQ(static_cast<int64_t>(per_rank.size()), static_cast<int64_t>(sp_size), "gather: one input per rank");
  std::vector<T> out(static_cast<size_t>(padded_len * width));
  for (int r = 0; r < sp_size; ++r) {
    const Shard& sh = shards[static_cast<size_t>(r)];
    SEQPAR_CHECK_EQ(static_cast<int64_t>(per_rank[static_cast<size_t>(r)].size()), sh.size() * width,
                    "gather: rank {} holds {} tokens of width {}", r, sh.size(), width);
    for (int64_t t = 0; t < sh.size(); ++t) {
      const T* src = per_rank[static_cast<size_t>(r)].data() + t * width;  // (width)
      T* dst = out.data() + sh.global_index[static_cast<size_t>(t)] * width;  // (width)
      for (int64_t c = 0; c < width; ++c) dst[c] = src[c];
    }
  }
  return out;
}

template <typename T>
std::vector<std::vector<T>> SpBatch::scatter(const std::vector<T>& stream, int64_t width) const {
  SEQPAR_CHECK(width >= 1, "scatter: width={} must be >= 1", width);
  SEQPAR_CHECK_EQ(static_cast<int64_t>(stream.size()), padded_len * width, "scatter: stream of {} tokens", padded_len);
  std::vector<std::vector<T>> out(static_cast<size_t>(sp_size));
  for (int r = 0; r < sp_size; ++r) {
    const Shard& sh = shards[static_cast<size_t>(r)];
    auto& dst = out[static_cast<size_t>(r)];
    dst.resize(static_cast<size_t>(sh.size() * width));
    for (int64_t t = 0; t < sh.size(); ++t) {
      const T* src = stream.data() + sh.global_index[static_cast<size_t>(t)] * width;
      for (int64_t c = 0; c < width; ++c) dst[static_cast<size_t>(t * width + c)] = src[c];
    }
  }
  return out;
}

}  // namespace seqpar
