// The embedded demo's task: associative recall across a long sequence. Key-value pairs sit at
// the start of the sequence, filler fills the middle, and queries at the end ask for the value
// of a key. With the sequence split over P ranks the pairs and the queries live on different
// ranks, so the answer is reachable only through attention across shards.
//
//   [k1 v1 k2 v2 ... kn vn] [filler ...] [Q ka va Q kb vb ...]
//
// Labels (HF convention, unshifted) are set only on the answers va, vb, ...: the loss and the
// accuracy are about recall alone.
#pragma once

#include <cstdint>
#include <vector>

#include "train/sp_batch.h"

namespace seqpar {

struct RecallTaskConfig {
  int64_t seq_len = 128;
  int num_pairs = 4;    // key-value pairs at the start
  int num_queries = 4;  // queries at the end
  int num_keys = 12;    // key alphabet
  int num_values = 12;  // value alphabet
  int vocab_size = 64;  // filler uses the ids above keys and values

  // InputError if the layout does not fit (sequence too short, alphabets beyond the vocab...).
  void validate() const;
  int32_t query_token() const { return 1; }
  int32_t first_key() const { return 2; }
  int32_t first_value() const { return 2 + num_keys; }
  int32_t first_filler() const { return 2 + num_keys + num_values; }
};

// `batch` sequences, deterministic from (seed, index of the batch).
std::vector<Sequence> make_recall_batch(const RecallTaskConfig& cfg, uint64_t seed, int64_t batch_index, int batch);

// Accuracy: over every answer position (labels != -100), whether argmax of the logits of the
// token before it equals the answer. logits [B*S, V] in row order; returns (correct, total).
std::pair<int64_t, int64_t> recall_accuracy(const std::vector<Sequence>& batch, const std::vector<float>& logits,
                                            int64_t vocab_size);

}  // namespace seqpar
