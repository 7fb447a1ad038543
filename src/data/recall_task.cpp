#include "data/recall_task.h"

#include <algorithm>
#include <numeric>
#include <random>

namespace seqpar {

void RecallTaskConfig::validate() const {
  SEQPAR_INPUT_CHECK(num_pairs >= 1 && num_pairs <= num_keys, "recall task: num_pairs={} must be in [1, num_keys={}]",
                     num_pairs, num_keys);
  SEQPAR_INPUT_CHECK(num_queries >= 1 && num_queries <= num_pairs,
                     "recall task: num_queries={} must be in [1, num_pairs={}]", num_queries, num_pairs);
  SEQPAR_INPUT_CHECK(first_filler() < vocab_size, "recall task: vocab_size={} leaves no filler tokens (needs > {})",
                     vocab_size, first_filler());
  const int64_t needed = num_pairs + 3 * num_queries + 1;
  SEQPAR_INPUT_CHECK(seq_len >= needed, "recall task: seq_len={} is too short for {} pairs and {} queries (needs >= {})",
                     seq_len, num_pairs, num_queries, needed);
}

std::vector<Sequence> make_recall_batch(const RecallTaskConfig& cfg, uint64_t seed, int64_t batch_index, int batch) {
  cfg.validate();
  std::vector<Sequence> out(batch);
  for (int b = 0; b < batch; ++b) {
    std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(batch_index) * 1000003ull + b);
    std::vector<int32_t> keys(cfg.num_keys);  // 0-based key indices, distinct within a sequence
    std::iota(keys.begin(), keys.end(), 0);
    std::shuffle(keys.begin(), keys.end(), rng);
    std::uniform_int_distribution<int32_t> value(0, cfg.num_values - 1);
    std::uniform_int_distribution<int32_t> filler(cfg.first_filler(), cfg.vocab_size - 1);
    std::vector<int32_t> vals(cfg.num_pairs);
    Sequence& s = out[b];
    for (int p = 0; p < cfg.num_pairs; ++p) {
      vals[p] = value(rng);
      s.input_ids.push_back(cfg.pair_token(keys[p], vals[p]));
    }
    const int64_t tail = 3 * cfg.num_queries;
    while (static_cast<int64_t>(s.input_ids.size()) < cfg.seq_len - tail) s.input_ids.push_back(filler(rng));
    std::vector<int> order(cfg.num_pairs);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    s.labels.assign(s.input_ids.size(), -100);
    for (int q = 0; q < cfg.num_queries; ++q) {
      int p = order[q];
      s.input_ids.push_back(cfg.query_token());
      s.input_ids.push_back(cfg.first_key() + keys[p]);
      s.input_ids.push_back(cfg.first_value() + vals[p]);
      s.labels.push_back(-100);
      s.labels.push_back(-100);
      s.labels.push_back(cfg.first_value() + vals[p]);
    }
  }
  return out;
}

std::pair<int64_t, int64_t> recall_accuracy(const std::vector<Sequence>& batch, const std::vector<float>& logits,
                                            int64_t V) {
  int64_t correct = 0, total = 0, row0 = 0;
  for (const Sequence& s : batch) {
    for (size_t i = 1; i < s.labels.size(); ++i) {
      if (s.labels[i] == -100) continue;
      const float* l = logits.data() + (row0 + static_cast<int64_t>(i) - 1) * V;  // (V) predicts token i
      int64_t arg = std::max_element(l, l + V) - l;
      correct += arg == s.labels[i];
      total += 1;
    }
    row0 += static_cast<int64_t>(s.input_ids.size());
  }
  return {correct, total};
}

}  // namespace seqpar
