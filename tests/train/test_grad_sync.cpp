// Gradients in one buffer (LlamaParams::zeros with one_buffer) and all_reduce_grads: one
// collective over the buffer sums exactly what one collective per tensor does.
#include <gtest/gtest.h>

#include <cstring>

#include "comm/communicator.h"
#include "model/llama.h"
#include "test_util.h"
#include "train/optimizer.h"
#include "train/trainer.h"

namespace seqpar {
namespace {

LlamaConfig small_config(bool tied) {
  LlamaConfig c = demo_model_config();
  c.vocab_size = 37;  // sizes that are not multiples of the alignment
  c.hidden_size = 24;
  c.intermediate_size = 40;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 6;
  c.tie_word_embeddings = tied;
  return c;
}

void fill(LlamaParams& p, uint64_t seed) {
  for (auto& [name, t] : p.named()) {
    std::vector<float> v = testing::random_vector(static_cast<size_t>(t->numel()), seed++);
    std::memcpy(t->data<float>(), v.data(), v.size() * sizeof(float));
  }
}

TEST(GradSync, OneBufferHoldsEveryTensorAligned) {
  for (bool tied : {false, true}) {
    const LlamaConfig c = small_config(tied);
    LlamaParams p = LlamaParams::zeros(c, DType::kF32, Device::cpu(), /*one_buffer=*/true);
    ASSERT_TRUE(p.all_in_flat());
    const auto* base = static_cast<const char*>(p.flat.raw());
    int64_t used = 0;
    for (auto& [name, t] : p.named()) {
      const int64_t offset = (static_cast<const char*>(t->raw()) - base) / static_cast<int64_t>(sizeof(float));
      EXPECT_EQ(offset % LlamaParams::kFlatAlign, 0) << name;
      used += t->numel();
    }
    EXPECT_GE(p.flat.numel(), used);
    EXPECT_LT(p.flat.numel(), used + static_cast<int64_t>(p.named().size()) * LlamaParams::kFlatAlign);
    // The per-tensor shapes are HF's.
    const auto shapes = LlamaParams::shapes(c);
    const auto named = p.named();
    for (size_t i = 0; i < shapes.size(); ++i) EXPECT_EQ(named[i].second->shape(), shapes[i].second) << shapes[i].first;
    // Writing through a tensor writes the buffer; replacing a tensor breaks the aliasing.
    p.final_norm.data<float>()[0] = 3.f;
    bool seen = false;
    for (int64_t i = 0; i < p.flat.numel(); ++i) seen = seen || p.flat.data<float>()[i] == 3.f;
    EXPECT_TRUE(seen);
    p.final_norm = Tensor::zeros(p.final_norm.shape(), DType::kF32);
    EXPECT_FALSE(p.all_in_flat());
    EXPECT_FALSE(LlamaParams::zeros(c, DType::kF32, Device::cpu()).all_in_flat());
  }
}

TEST(GradSync, OneCollectiveEqualsOnePerTensor) {
  const LlamaConfig c = small_config(false);
  constexpr int kRanks = 3;
  std::vector<LlamaParams> flat(kRanks), apart(kRanks), broken(kRanks);
  for (int r = 0; r < kRanks; ++r) {
    flat[r] = LlamaParams::zeros(c, DType::kF32, Device::cpu(), true);
    apart[r] = LlamaParams::zeros(c, DType::kF32, Device::cpu());
    broken[r] = LlamaParams::zeros(c, DType::kF32, Device::cpu(), true);
    fill(flat[r], 100 * r + 1);
    fill(apart[r], 100 * r + 1);
    fill(broken[r], 100 * r + 1);
    broken[r].layers[0].up_proj = broken[r].layers[0].up_proj.clone();  // outside the buffer now
  }
  run_local_ranks(kRanks, [&](Communicator& comm) {
    const int r = comm.rank();
    all_reduce_grads(comm, flat[r]);
    for (auto& [name, g] : apart[r].named()) comm.all_reduce(*g, ReduceOp::kSum);
    all_reduce_grads(comm, broken[r]);  // falls back to one collective per tensor
  });
  for (int r = 0; r < kRanks; ++r) {
    const auto a = flat[r].named(), b = apart[r].named(), d = broken[r].named();
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(std::memcmp(a[i].second->raw(), b[i].second->raw(), a[i].second->nbytes()), 0) << a[i].first;
      EXPECT_EQ(std::memcmp(d[i].second->raw(), b[i].second->raw(), d[i].second->nbytes()), 0) << d[i].first;
    }
  }
}

}  // namespace
}  // namespace seqpar
