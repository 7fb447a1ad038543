// Sequence-parallel batches: label shift, folding, padding, layouts, mask metadata, balance.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "data/sp_batch.h"

namespace seqpar {
namespace {

using I32 = std::vector<int32_t>;
using I64 = std::vector<int64_t>;

// Pretraining row: labels = ids.
Sequence pretrain_row(const I32& ids, const I32& doc_lens = {}) { return {ids, ids, doc_lens}; }

// A batch of rows of random lengths, some packed, with distinct token values.
std::vector<Sequence> random_batch(uint64_t seed, int rows) {
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::vector<Sequence> batch;
  int32_t next_id = 1;
  for (int r = 0; r < rows; ++r) {
    const int len = 1 + static_cast<int>(rng() % 23);
    I32 ids(static_cast<size_t>(len));
    for (auto& x : ids) x = next_id++;
    I32 docs;
    if (r % 2 == 1) {  // odd rows: packed into random documents
      int left = len;
      while (left > 0) {
        const int d = 1 + static_cast<int>(rng() % static_cast<uint32_t>(left));
        docs.push_back(d);
        left -= d;
      }
    }
    batch.push_back(pretrain_row(ids, docs));
  }
  return batch;
}

// Reassembles a per-token field into stream order with the batch's own gather.
template <typename F>
I32 stream_of(const SpBatch& b, F field) {
  std::vector<I32> per_rank;
  for (const Shard& sh : b.shards) per_rank.push_back(field(sh));
  return b.gather(per_rank);
}

template <typename F>
void expect_input_error(F f, const std::string& fragment) {
  try {
    f();
    FAIL() << "no InputError; expected one containing: " << fragment;
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(SpBatch, ShiftLabelsOneDocument) {
  EXPECT_EQ(shift_labels({1, 2, 3, 4}), (I32{2, 3, 4, -100}));
  EXPECT_EQ(shift_labels({7}), (I32{-100}));
  // Ignored labels move with the shift: the token before a -100 predicts nothing.
  EXPECT_EQ(shift_labels({-100, -100, 7, 8}), (I32{-100, 7, 8, -100}));
}

TEST(SpBatch, ShiftLabelsNeverCrossADocumentBoundary) {
  // Documents [1,2] [3,4,5] [6]: the last token of each document predicts nothing.
  EXPECT_EQ(shift_labels({1, 2, 3, 4, 5, 6}, {2, 3, 1}), (I32{2, -100, 4, 5, -100, -100}));
  // Shifting happens on the whole row before the cut: the targets in the shards are the same
  // whatever P and the layout, including at shard boundaries.
  Sequence row = pretrain_row({1, 2, 3, 4, 5, 6, 7, 8, 9}, {4, 5});
  const I32 want = {2, 3, 4, -100, 6, 7, 8, 9, -100};
  for (SpLayout layout : {SpLayout::kContiguous, SpLayout::kZigzag})
    for (int P : {1, 2, 3, 4}) {
      SpBatch b = make_sp_batch({row}, P, layout);
      I32 targets = stream_of(b, [](const Shard& s) { return s.targets; });
      EXPECT_EQ(I32(targets.begin(), targets.begin() + 9), want) << "P=" << P;
    }
}

TEST(SpBatch, RowsNeverPredictAcrossRows) {
  SpBatch b = make_sp_batch({pretrain_row({1, 2, 3}), pretrain_row({4, 5})}, 1, SpLayout::kContiguous);
  EXPECT_EQ(b.shards[0].targets, (I32{2, 3, -100, 5, -100}));
  EXPECT_EQ(b.good_tokens, 3);
  EXPECT_EQ(b.shards[0].good_tokens, 3);
}

TEST(SpBatch, EveryTokenOnExactlyOneRankAndGatherRestoresOrder) {
  for (SpLayout layout : {SpLayout::kContiguous, SpLayout::kZigzag})
    for (int P = 1; P <= 5; ++P) {
      std::vector<Sequence> batch = random_batch(100 + static_cast<uint64_t>(P), 6);
      I32 want_ids;
      for (const Sequence& row : batch) want_ids.insert(want_ids.end(), row.input_ids.begin(), row.input_ids.end());
      SpBatch b = make_sp_batch(batch, P, layout, /*pad_id=*/-7);
      SCOPED_TRACE(::testing::Message() << sp_layout_name(layout) << " P=" << P << " S=" << b.padded_len);
      ASSERT_EQ(b.shards.size(), static_cast<size_t>(P));
      EXPECT_EQ(b.unpadded_len, static_cast<int64_t>(want_ids.size()));
      EXPECT_EQ(b.padded_len % sp_layout_multiple(layout, P), 0);
      std::vector<int> seen(static_cast<size_t>(b.padded_len), 0);
      int64_t good = 0;
      for (const Shard& sh : b.shards) {
        EXPECT_EQ(sh.size(), b.shard_len());
        for (int64_t t = 0; t < sh.size(); ++t) {
          ++seen[static_cast<size_t>(sh.global_index[static_cast<size_t>(t)])];
          EXPECT_EQ(sh.pos[static_cast<size_t>(t)], sh.global_index[static_cast<size_t>(t)]);
        }
        good += sh.good_tokens;
      }
      EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int c) { return c == 1; }));
      EXPECT_EQ(good, b.good_tokens);

      I32 ids = stream_of(b, [](const Shard& s) { return s.input_ids; });
      EXPECT_EQ(I32(ids.begin(), ids.begin() + b.unpadded_len), want_ids);
      EXPECT_TRUE(std::all_of(ids.begin() + b.unpadded_len, ids.end(), [](int32_t x) { return x == -7; }));
      // scatter is gather's inverse.
      std::vector<I32> per_rank = b.scatter(ids);
      for (int r = 0; r < P; ++r) EXPECT_EQ(per_rank[static_cast<size_t>(r)], b.shards[static_cast<size_t>(r)].input_ids);

      // Tensor gather of [T_r, 3] rows (as logits would be): row g of the stream holds g*3+c.
      std::vector<Tensor> rows;
      for (const Shard& sh : b.shards) {
        std::vector<float> v;
        for (int64_t g : sh.global_index)
          for (int c = 0; c < 3; ++c) v.push_back(static_cast<float>(g * 3 + c));
        rows.push_back(Tensor::from_vector<float>({sh.size(), 3}, v));
      }
      Tensor all = b.gather(rows);
      ASSERT_EQ(all.shape(), (Shape{b.padded_len, 3}));
      for (int64_t i = 0; i < all.numel(); ++i) ASSERT_EQ(all.data<float>()[i], static_cast<float>(i));
    }
}

TEST(SpBatch, ZigzagChunkAssignment) {
  // P=2, S=8: chunks of 2; rank 0 holds chunks 0 and 3, rank 1 chunks 1 and 2.
  SpBatch b2 = make_sp_batch({pretrain_row({0, 1, 2, 3, 4, 5, 6, 7})}, 2, SpLayout::kZigzag);
  EXPECT_EQ(b2.shards[0].global_index, (I64{0, 1, 6, 7}));
  EXPECT_EQ(b2.shards[1].global_index, (I64{2, 3, 4, 5}));
  EXPECT_EQ(b2.shards[0].input_ids, (I32{0, 1, 6, 7}));
  EXPECT_EQ(b2.num_pad, 0);
  // P=3, S=6: chunks of 1; ranks hold {0,5}, {1,4}, {2,3}.
  SpBatch b3 = make_sp_batch({pretrain_row({0, 1, 2, 3, 4, 5})}, 3, SpLayout::kZigzag);
  EXPECT_EQ(b3.shards[0].global_index, (I64{0, 5}));
  EXPECT_EQ(b3.shards[1].global_index, (I64{1, 4}));
  EXPECT_EQ(b3.shards[2].global_index, (I64{2, 3}));
  // P=4, S=24: chunks of 3; rank r holds chunk r then chunk 7-r.
  I32 ids(24);
  for (int i = 0; i < 24; ++i) ids[static_cast<size_t>(i)] = i;
  SpBatch b4 = make_sp_batch({pretrain_row(ids)}, 4, SpLayout::kZigzag);
  EXPECT_EQ(b4.shards[0].global_index, (I64{0, 1, 2, 21, 22, 23}));
  EXPECT_EQ(b4.shards[1].global_index, (I64{3, 4, 5, 18, 19, 20}));
  EXPECT_EQ(b4.shards[2].global_index, (I64{6, 7, 8, 15, 16, 17}));
  EXPECT_EQ(b4.shards[3].global_index, (I64{9, 10, 11, 12, 13, 14}));
  // Contiguous for comparison: rank r holds [r*S/P, (r+1)*S/P).
  SpBatch c4 = make_sp_batch({pretrain_row(ids)}, 4, SpLayout::kContiguous);
  EXPECT_EQ(c4.shards[2].global_index, (I64{12, 13, 14, 15, 16, 17}));
}

TEST(SpBatch, PadsWhenLengthIsNotAMultiple) {
  // 10 tokens in two rows.
  std::vector<Sequence> batch = {pretrain_row({1, 2, 3, 4, 5, 6}), pretrain_row({7, 8, 9, 10})};
  SpBatch c = make_sp_batch(batch, 4, SpLayout::kContiguous, /*pad_id=*/99);
  EXPECT_EQ(c.padded_len, 12);
  EXPECT_EQ(c.num_pad, 2);
  EXPECT_EQ(c.unpadded_len, 10);
  SpBatch z = make_sp_batch(batch, 4, SpLayout::kZigzag, 99);
  EXPECT_EQ(z.padded_len, 16);
  EXPECT_EQ(z.num_pad, 6);
  EXPECT_EQ(z.shard_len(), 4);
  SpBatch z3 = make_sp_batch(batch, 3, SpLayout::kZigzag, 99);
  EXPECT_EQ(z3.padded_len, 12);
  EXPECT_EQ(z3.num_pad, 2);

  I32 ids = stream_of(z, [](const Shard& s) { return s.input_ids; });
  I32 targets = stream_of(z, [](const Shard& s) { return s.targets; });
  I32 positions = stream_of(z, [](const Shard& s) { return s.position_ids; });
  I32 segs = stream_of(z, [](const Shard& s) { return s.seg; });
  EXPECT_EQ(z.num_docs, 2);
  for (int64_t i = 10; i < 16; ++i) {
    const auto k = static_cast<size_t>(i);
    EXPECT_EQ(ids[k], 99);
    EXPECT_EQ(targets[k], kIgnoreIndex);
    EXPECT_EQ(positions[k], i - 10);
    EXPECT_EQ(segs[k], 2);  // one segment of their own, after the documents
  }
  // Already a multiple: no pad.
  EXPECT_EQ(make_sp_batch(batch, 5, SpLayout::kContiguous).num_pad, 0);
  EXPECT_EQ(make_sp_batch(batch, 1, SpLayout::kZigzag).num_pad, 0);
}

TEST(SpBatch, PromptOnlyShardHasNoGoodTokens) {
  // SFT row: an 8-token prompt (labels -100), then a 4-token response.
  I32 ids = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  I32 labels = {-100, -100, -100, -100, -100, -100, -100, -100, 9, 10, 11, 12};
  SpBatch b = make_sp_batch({Sequence{ids, labels, {}}}, 2, SpLayout::kContiguous);
  EXPECT_EQ(b.shards[0].good_tokens, 0);
  EXPECT_TRUE(std::all_of(b.shards[0].targets.begin(), b.shards[0].targets.end(), [](int32_t t) { return t == -100; }));
  // Rank 1 holds tokens 6..11: token 7 predicts 9 (the first response token), 11 predicts nothing.
  EXPECT_EQ(b.shards[1].targets, (I32{-100, 9, 10, 11, 12, -100}));
  EXPECT_EQ(b.shards[1].good_tokens, 4);
  EXPECT_EQ(b.good_tokens, 4);
}

TEST(SpBatch, PositionIdsRestartPerDocumentAndSegmentsSeparateRowsDocsPads) {
  // Row A: one document of 3; row B: documents of 2 and 3. 8 tokens, P=3 contiguous -> 1 pad.
  std::vector<Sequence> batch = {pretrain_row({1, 2, 3}), pretrain_row({4, 5, 6, 7, 8}, {2, 3})};
  SpBatch b = make_sp_batch(batch, 3, SpLayout::kContiguous);
  EXPECT_EQ(b.num_docs, 3);
  EXPECT_EQ(stream_of(b, [](const Shard& s) { return s.position_ids; }), (I32{0, 1, 2, 0, 1, 0, 1, 2, 0}));
  EXPECT_EQ(stream_of(b, [](const Shard& s) { return s.seg; }), (I32{0, 0, 0, 1, 1, 2, 2, 2, 3}));
  EXPECT_EQ(stream_of(b, [](const Shard& s) { return s.targets; }), (I32{2, 3, -100, 5, -100, 7, 8, -100, -100}));
}

// rope_len (dynamic / longrope RoPE's batch length): 1 + the largest position of a real token, i.e.
// the longest document over all rows; pads do not count, and it is one number for every rank.
TEST(SpBatch, RopeLenIsTheLongestDocument) {
  std::vector<Sequence> batch = {pretrain_row({1, 2, 3}), pretrain_row({4, 5, 6, 7, 8}, {2, 3})};
  EXPECT_EQ(make_sp_batch(batch, 3, SpLayout::kContiguous).rope_len, 3);
  EXPECT_EQ(make_sp_batch(batch, 3, SpLayout::kZigzag).rope_len, 3) << "4 pads (positions 0..3) do not count";
  batch.push_back(pretrain_row({9, 10, 11, 12}));
  EXPECT_EQ(make_sp_batch(batch, 1, SpLayout::kContiguous).rope_len, 4);
}

TEST(SpBatch, MaskMetadataMatchesDocumentsInEveryLayout) {
  // attention.h: query i sees key j iff seg equal and pos_k <= pos_q. Across all ranks' tokens,
  // that must mean "same document of the same row, and j not after i", and pads see no real token.
  std::vector<Sequence> batch = random_batch(7, 6);
  ASSERT_TRUE(std::any_of(batch.begin(), batch.end(), [](const Sequence& s) { return s.doc_lens.size() >= 2; }));
  std::vector<int64_t> doc_of;  // document number of each real stream token
  int64_t d = 0;
  for (const Sequence& row : batch) {
    I32 docs = row.doc_lens.empty() ? I32{static_cast<int32_t>(row.input_ids.size())} : row.doc_lens;
    for (int32_t len : docs) {
      doc_of.insert(doc_of.end(), static_cast<size_t>(len), d);
      ++d;
    }
  }
  for (SpLayout layout : {SpLayout::kContiguous, SpLayout::kZigzag})
    for (int P : {2, 3, 4}) {
      SpBatch b = make_sp_batch(batch, P, layout);
      std::vector<std::pair<int32_t, int32_t>> meta;  // (seg, pos) of every token, rank by rank
      for (const Shard& sh : b.shards)
        for (int64_t t = 0; t < sh.size(); ++t) meta.emplace_back(sh.seg[static_cast<size_t>(t)], sh.pos[static_cast<size_t>(t)]);
      for (auto [sq, pq] : meta)
        for (auto [sk, pk] : meta) {
          const bool sees = sq == sk && pk <= pq;
          const bool q_real = pq < b.unpadded_len, k_real = pk < b.unpadded_len;
          bool want;
          if (q_real && k_real)
            want = doc_of[static_cast<size_t>(pq)] == doc_of[static_cast<size_t>(pk)] && pk <= pq;
          else
            want = !q_real && !k_real && pk <= pq;  // pads see only pads
          ASSERT_EQ(sees, want) << sp_layout_name(layout) << " P=" << P << " q=" << pq << " k=" << pk;
        }
    }
}

TEST(SpBatch, ZigzagBalancesCausalWorkContiguousDoesNot) {
  const int64_t S = 4096;
  I32 ids(static_cast<size_t>(S), 5);
  for (int P : {2, 4, 8}) {
    SpBatch z = make_sp_batch({pretrain_row(ids)}, P, SpLayout::kZigzag);
    SpBatch c = make_sp_batch({pretrain_row(ids)}, P, SpLayout::kContiguous);
    auto ratio = [&](const SpBatch& b) {
      int64_t lo = INT64_MAX, hi = 0, total = 0;
      for (int r = 0; r < P; ++r) {
        const int64_t w = attention_work(b, r);
        lo = std::min(lo, w);
        hi = std::max(hi, w);
        total += w;
      }
      EXPECT_EQ(total, S * (S + 1) / 2);  // every causal pair counted once
      return static_cast<double>(hi) / static_cast<double>(lo);
    };
    const double rz = ratio(z), rc = ratio(c);
    EXPECT_LT(rz, 1.01) << "P=" << P;
    // Contiguous: the last rank does ~(2P-1)x the first rank's work.
    EXPECT_GT(rc, 2.0 * P - 1.5) << "P=" << P;
  }
  // Work counts only the segment's own keys: two documents of 4 in one row, P=1.
  SpBatch docs = make_sp_batch({pretrain_row({1, 2, 3, 4, 5, 6, 7, 8}, {4, 4})}, 1, SpLayout::kContiguous);
  EXPECT_EQ(attention_work(docs, 0), 2 * (4 * 5 / 2));
}

TEST(SpBatch, ShardMetaAndLocalCuSeqlens) {
  SpBatch b = make_sp_batch({pretrain_row({1, 2, 3, 4, 5, 6, 7, 8})}, 2, SpLayout::kZigzag);
  // Rank 0 holds stream tokens 0,1 and 6,7 of one document: two runs.
  EXPECT_EQ(shard_cu_seqlens(b.shards[0]), (I32{0, 2, 4}));
  EXPECT_EQ(shard_cu_seqlens(b.shards[1]), (I32{0, 4}));
  TokenMeta m = shard_token_meta(b.shards[0]);
  ASSERT_EQ(m.size(), 4);
  EXPECT_EQ(m.pos.data<int32_t>()[2], 6);
  EXPECT_EQ(m.seg.data<int32_t>()[3], 0);
  // Documents split runs too: [1,2 | 3,4,5] + pad, P=1 contiguous -> no pad, two runs.
  SpBatch d = make_sp_batch({pretrain_row({1, 2, 3, 4, 5}, {2, 3})}, 1, SpLayout::kContiguous);
  EXPECT_EQ(shard_cu_seqlens(d.shards[0]), (I32{0, 2, 5}));
}

TEST(SpBatch, LayoutNames) {
  EXPECT_EQ(parse_sp_layout("zigzag"), SpLayout::kZigzag);
  EXPECT_EQ(parse_sp_layout("contiguous"), SpLayout::kContiguous);
  EXPECT_EQ(sp_layout_name(SpLayout::kZigzag), "zigzag");
  expect_input_error([] { parse_sp_layout("ring", "--sp-layout"); }, "--sp-layout='ring' must be one of: contiguous, zigzag");
}

TEST(SpBatch, ClearErrorsBeforeAnyWork) {
  auto row = pretrain_row({1, 2, 3});
  expect_input_error([&] { make_sp_batch({row}, 0, SpLayout::kContiguous); }, "sp_size=0 must be >= 1");
  expect_input_error([&] { make_sp_batch({}, 2, SpLayout::kContiguous); }, "the batch is empty");
  expect_input_error([&] { make_sp_batch({row, Sequence{{1, 2}, {1}, {}}}, 2, SpLayout::kZigzag); },
                     "batch row 1: labels has 1 entries but input_ids has 2");
  expect_input_error([&] { make_sp_batch({row, pretrain_row({1, 2, 3}, {1, 1})}, 2, SpLayout::kZigzag); },
                     "batch row 1: doc_lens sum to 2 but the row has 3 tokens");
  expect_input_error([&] { make_sp_batch({pretrain_row({1, 2, 3}, {3, 0})}, 2, SpLayout::kZigzag); },
                     "batch row 0: doc_lens[1]=0 must be >= 1");
  expect_input_error([&] { make_sp_batch({row, pretrain_row({})}, 2, SpLayout::kZigzag); }, "batch row 1 has 0 tokens");
  expect_input_error([&] { shift_labels({1, 2}, {3}); }, "doc_lens sum to 3 but the row has 2 tokens");
}

}  // namespace
}  // namespace seqpar
