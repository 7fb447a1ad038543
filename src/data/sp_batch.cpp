#include "data/sp_batch.h"

#include <algorithm>
#include <limits>

namespace seqpar {

std::string_view sp_layout_name(SpLayout layout) {
  switch (layout) {
    case SpLayout::kContiguous:
      return "contiguous";
    case SpLayout::kZigzag:
      return "zigzag";
  }
  return "unknown";
}

SpLayout parse_sp_layout(const std::string& name, const std::string& setting) {
  if (name == "contiguous") return SpLayout::kContiguous;
  if (name == "zigzag") return SpLayout::kZigzag;
  throw InputError(fmt::format("{}='{}' must be one of: contiguous, zigzag", setting, name));
}

int64_t sp_layout_multiple(SpLayout layout, int sp_size) {
  SEQPAR_INPUT_CHECK(sp_size >= 1, "sp_size={} must be >= 1", sp_size);
  return layout == SpLayout::kZigzag ? 2 * static_cast<int64_t>(sp_size) : sp_size;
}

std::vector<int64_t> sp_layout_indices(int64_t padded_len, int sp_size, SpLayout layout, int rank) {
  const int64_t multiple = sp_layout_multiple(layout, sp_size);
  SEQPAR_CHECK(padded_len >= 0 && padded_len % multiple == 0, "padded_len={} must be a multiple of {} ({} layout, P={})",
               padded_len, multiple, sp_layout_name(layout), sp_size);
  SEQPAR_CHECK(rank >= 0 && rank < sp_size, "rank={} must be in [0, {})", rank, sp_size);
  const int64_t P = sp_size;
  const int64_t T = padded_len / P;  // tokens per rank
  std::vector<int64_t> idx;
  idx.reserve(static_cast<size_t>(T));
  if (layout == SpLayout::kContiguous) {
    for (int64_t t = 0; t < T; ++t) idx.push_back(rank * T + t);
  } else {
    const int64_t chunk = padded_len / (2 * P);
    const int64_t chunks[2] = {rank, 2 * P - 1 - rank};
    for (int64_t c : chunks)
      for (int64_t t = 0; t < chunk; ++t) idx.push_back(c * chunk + t);
  }
  return idx;
}

namespace {

// doc_lens of a row of n tokens: entries >= 1 summing to n (empty = one document).
void check_doc_lens(const std::vector<int32_t>& doc_lens, size_t n, size_t r) {
  int64_t sum = 0;
  for (size_t d = 0; d < doc_lens.size(); ++d) {
    SEQPAR_INPUT_CHECK(doc_lens[d] >= 1, "batch row {}: doc_lens[{}]={} must be >= 1", r, d, doc_lens[d]);
    sum += doc_lens[d];
  }
  SEQPAR_INPUT_CHECK(doc_lens.empty() || sum == static_cast<int64_t>(n),
                     "batch row {}: doc_lens sum to {} but the row has {} tokens: they must be equal", r, sum, n);
}

void check_row(const Sequence& row, size_t r) {
  const size_t n = row.input_ids.size();
  SEQPAR_INPUT_CHECK(n > 0, "batch row {} has 0 tokens: every row must hold at least one token", r);
  SEQPAR_INPUT_CHECK(row.labels.size() == n, "batch row {}: labels has {} entries but input_ids has {}: they must match",
                     r, row.labels.size(), n);
  check_doc_lens(row.doc_lens, n, r);
}

// The row's document lengths, with "empty" spelled out as one document.
std::vector<int32_t> row_docs(const std::vector<int32_t>& doc_lens, size_t n) {
  if (!doc_lens.empty()) return doc_lens;
  return {static_cast<int32_t>(n)};
}

}  // namespace

int64_t longest_document(const std::vector<Sequence>& batch) {
  int64_t longest = 0;
  for (const Sequence& row : batch)
    for (const int32_t len : row_docs(row.doc_lens, row.input_ids.size())) longest = std::max<int64_t>(longest, len);
  return longest;
}

namespace {

// out [n] (=): within a document [start, start+len), token i predicts labels[i+1]; the
// document's last token predicts nothing (-100).
void shift_row(int32_t* out, const std::vector<int32_t>& labels, const std::vector<int32_t>& doc_lens) {
  int64_t start = 0;
  for (int32_t len : row_docs(doc_lens, labels.size())) {
    for (int64_t i = start; i + 1 < start + len; ++i) out[i] = labels[static_cast<size_t>(i + 1)];
    out[start + len - 1] = kIgnoreIndex;
    start += len;
  }
}

}  // namespace

std::vector<int32_t> shift_labels(const std::vector<int32_t>& labels, const std::vector<int32_t>& doc_lens) {
  SEQPAR_INPUT_CHECK(!labels.empty(), "shift_labels: the row has 0 tokens: it must hold at least one token");
  check_doc_lens(doc_lens, labels.size(), 0);
  std::vector<int32_t> out(labels.size());
  shift_row(out.data(), labels, doc_lens);
  return out;
}

SpBatch make_sp_batch(const std::vector<Sequence>& batch, int sp_size, SpLayout layout, int32_t pad_id) {
  // ---- every check before any work
  SEQPAR_INPUT_CHECK(sp_size >= 1, "sp_size={} must be >= 1", sp_size);
  SEQPAR_INPUT_CHECK(!batch.empty(), "the batch is empty: it must hold at least one row");
  int64_t unpadded = 0;
  for (size_t r = 0; r < batch.size(); ++r) {
    check_row(batch[r], r);
    unpadded += static_cast<int64_t>(batch[r].input_ids.size());
  }
  const int64_t multiple = sp_layout_multiple(layout, sp_size);
  const int64_t S = (unpadded + multiple - 1) / multiple * multiple;
  SEQPAR_INPUT_CHECK(S <= std::numeric_limits<int32_t>::max(),
                     "the batch holds {} tokens ({} after padding to a multiple of {}): at most 2^31-1 are supported",
                     unpadded, S, multiple);

  // ---- the whole padded stream: [S] each
  std::vector<int32_t> ids, targets, position_ids, seg;
  ids.reserve(static_cast<size_t>(S));
  targets.reserve(static_cast<size_t>(S));
  position_ids.reserve(static_cast<size_t>(S));
  seg.reserve(static_cast<size_t>(S));
  int32_t next_seg = 0;
  for (const Sequence& row : batch) {
    const size_t n = row.input_ids.size();
    ids.insert(ids.end(), row.input_ids.begin(), row.input_ids.end());
    targets.resize(targets.size() + n);
    shift_row(targets.data() + targets.size() - n, row.labels, row.doc_lens);
    for (int32_t len : row_docs(row.doc_lens, n)) {
      for (int32_t p = 0; p < len; ++p) {
        position_ids.push_back(p);
        seg.push_back(next_seg);
      }
      ++next_seg;
    }
  }
  const int32_t pad_seg = next_seg;
  for (int64_t p = 0; unpadded + p < S; ++p) {
    ids.push_back(pad_id);
    targets.push_back(kIgnoreIndex);
    position_ids.push_back(static_cast<int32_t>(p));
    seg.push_back(pad_seg);
  }

  // ---- cut per layout
  SpBatch out;
  out.layout = layout;
  out.sp_size = sp_size;
  out.padded_len = S;
  out.unpadded_len = unpadded;
  out.num_pad = S - unpadded;
  out.num_docs = pad_seg;
  out.rope_len = longest_document(batch);
  out.shards.resize(static_cast<size_t>(sp_size));
  for (int r = 0; r < sp_size; ++r) {
    Shard& sh = out.shards[static_cast<size_t>(r)];
    sh.global_index = sp_layout_indices(S, sp_size, layout, r);
    const size_t T = sh.global_index.size();
    sh.input_ids.resize(T);
    sh.targets.resize(T);
    sh.position_ids.resize(T);
    sh.seg.resize(T);
    sh.pos.resize(T);
    for (size_t t = 0; t < T; ++t) {
      const auto g = static_cast<size_t>(sh.global_index[t]);
      sh.input_ids[t] = ids[g];
      sh.targets[t] = targets[g];
      sh.position_ids[t] = position_ids[g];
      sh.seg[t] = seg[g];
      sh.pos[t] = static_cast<int32_t>(g);
      if (targets[g] != kIgnoreIndex) ++sh.good_tokens;
    }
    out.good_tokens += sh.good_tokens;
  }
  return out;
}

Tensor SpBatch::gather(const std::vector<Tensor>& per_rank) const {
  SEQPAR_CHECK_EQ(static_cast<int64_t>(per_rank.size()), static_cast<int64_t>(sp_size), "gather: one tensor per rank");
  const Tensor& first = per_rank[0];
  SEQPAR_CHECK(first.defined() && first.ndim() >= 1, "gather: rank 0's tensor must have a token dim");
  Shape shape = first.shape();
  shape[0] = padded_len;
  Tensor out = Tensor::empty(shape, first.dtype(), Device::cpu());
  size_t row_bytes = dtype_size(first.dtype());  // bytes of one token's row: the trailing dims
  for (size_t d = 1; d < shape.size(); ++d) row_bytes *= static_cast<size_t>(shape[d]);
  auto* dst = static_cast<char*>(out.raw());
  for (int r = 0; r < sp_size; ++r) {
    const Tensor& src = per_rank[static_cast<size_t>(r)];
    const Shard& sh = shards[static_cast<size_t>(r)];
    Shape want = first.shape();
    want[0] = sh.size();
    check_shape(src, want, "gather input");
    check_dtype(src, first.dtype(), "gather input");
    // Copy runs of rows that are consecutive in the stream with one copy each (a chunk is one
    // run), so device tensors take a handful of copies, not one per token.
    const auto* sbase = static_cast<const char*>(src.raw());
    int64_t t = 0;
    while (t < sh.size()) {
      int64_t end = t + 1;
      while (end < sh.size() && sh.global_index[static_cast<size_t>(end)] == sh.global_index[static_cast<size_t>(t)] + (end - t))
        ++end;
      copy_bytes(dst + static_cast<size_t>(sh.global_index[static_cast<size_t>(t)]) * row_bytes, Device::cpu(),
                 sbase + static_cast<size_t>(t) * row_bytes, src.device(), static_cast<size_t>(end - t) * row_bytes);
      t = end;
    }
  }
  return out;
}

int64_t attention_work(const SpBatch& batch, int rank) {
  SEQPAR_CHECK(rank >= 0 && rank < batch.sp_size, "rank={} must be in [0, {})", rank, batch.sp_size);
  // Where each segment starts in the stream: segments are contiguous and numbered in stream
  // order, so a query at stream index g in a segment starting at s sees keys s..g: g - s + 1.
  std::vector<int64_t> seg_start(static_cast<size_t>(batch.num_docs + 1), -1);
  for (const Shard& sh : batch.shards)
    for (int64_t t = 0; t < sh.size(); ++t) {
      auto& s = seg_start[static_cast<size_t>(sh.seg[static_cast<size_t>(t)])];
      const int64_t g = sh.global_index[static_cast<size_t>(t)];
      if (s < 0 || g < s) s = g;
    }
  const Shard& sh = batch.shards[static_cast<size_t>(rank)];
  int64_t work = 0;
  for (int64_t t = 0; t < sh.size(); ++t)
    work += sh.global_index[static_cast<size_t>(t)] - seg_start[static_cast<size_t>(sh.seg[static_cast<size_t>(t)])] + 1;
  return work;
}

TokenMeta shard_token_meta(const Shard& shard) {
  return {Tensor::from_vector<int32_t>({shard.size()}, shard.seg), Tensor::from_vector<int32_t>({shard.size()}, shard.pos)};
}

std::vector<int32_t> shard_cu_seqlens(const Shard& shard) {
  std::vector<int32_t> cu{0};
  for (int64_t t = 1; t <= shard.size(); ++t) {
    const auto i = static_cast<size_t>(t);
    const bool boundary = t == shard.size() || shard.seg[i] != shard.seg[i - 1] || shard.pos[i] != shard.pos[i - 1] + 1;
    if (boundary) cu.push_back(static_cast<int32_t>(t));
  }
  return cu;
}

}  // namespace seqpar
