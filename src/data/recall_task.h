// The embedded demo's task: associative recall across a long sequence. Key-value pairs sit at
// the start of the sequence, filler fills the middle, and queries at the end ask for the value
// of a key. With the sequence split over P ranks the pairs and the queries live on different
// ranks, so the answer is reachable only through attention across shards.
//
//   [(k1,v1) (k2,v2) ... (kn,vn)] [filler ...] [Q ka va Q kb vb ...]
//
// Each pair is one token (k, v) of a K×V block of the vocabulary, so the lookup is one attention
// hop: the query's key token must find the pair token carrying its key and read the value out of
// it. (A two-token "k v" layout needs an induction circuit over two layers, which a model this
// small learns far more slowly: measured 75-80% after 400 steps, against the 90% the demo
// must reach in minutes on two cores.)
//
// Labels (HF convention, unshifted) are set only on the answers va, vb, ...: the loss and the
// accuracy are about recall alone.
#pragma once

#include <cstdint>
#include <vector>

#include "data/sp_batch.h"

namespace seqpar {

struct RecallTaskConfig {
  int64_t seq_len = 128;
  int num_pairs = 8;    // key-value pairs at the start
  int num_queries = 8;  // queries at the end
  int num_keys = 8;      // key alphabet
  int num_values = 8;    // value alphabet
  int vocab_size = 128;  // ids: Q, pair tokens (K*V), keys, values, then filler

  // InputError if the layout does not fit (sequence too short, alphabets beyond the vocab...).
  void validate() const;
  int32_t query_token() const { return 1; }
  int32_t pair_token(int32_t key, int32_t value) const { return 2 + key * num_values + value; }  // key, value: 0-based
  int32_t first_key() const { return 2 + num_keys * num_values; }
  int32_t first_value() const { return first_key() + num_keys; }
  int32_t first_filler() const { return first_value() + num_values; }
};

// `batch` sequences, deterministic from (seed, index of the batch).
std::vector<Sequence> make_recall_batch(const RecallTaskConfig& cfg, uint64_t seed, int64_t batch_index, int batch);

// Accuracy: over every answer position (labels != -100), whether argmax of the logits of the
// token before it equals the answer. logits [B*S, V] in row order; returns (correct, total).
std::pair<int64_t, int64_t> recall_accuracy(const std::vector<Sequence>& batch, const std::vector<float>& logits,
                                            int64_t vocab_size);

}  // namespace seqpar
