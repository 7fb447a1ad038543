// The op harness on the CPU (tests/ops/op_harness.h): every op case and every attention case the
// CPU suite can afford, on the CPU f32 path against the f64 reference, and finite differences of
// the reference's backward for the small cases. The CUDA paths run the same cases in test_cuda.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "ops/op_harness.h"

namespace seqpar::optest {
namespace {

TEST(OpHarness, EveryOpOnTheCpu) {
  int run = 0, fd = 0;
  for (const OpCase& c : op_cases()) {
    std::string skipped;
    if (check_op(c, cpu_backend(), &skipped)) {
      ++run;
    } else {
      std::printf("[ skipped ] %s on cpu-f32: %s\n", c.name.c_str(), skipped.c_str());
    }
    if (check_op_finite_differences(c)) ++fd;
  }
  EXPECT_GT(run, 50);
  EXPECT_GE(fd, 8) << "rmsnorm, layernorm, rope, swiglu, gelu erf and tanh, matmul, cross-entropy: each has a small case";
}

TEST(OpHarness, EveryAttentionCaseOnTheCpu) {
  int run = 0, fd = 0;
  for (const AttnCase& c : attn_cases()) {
    std::string skipped;
    if (check_attention(c, cpu_backend(), &skipped)) {
      ++run;
    } else {
      std::printf("[ skipped ] %s on cpu-f32: %s\n", c.name.c_str(), skipped.c_str());
    }
    if (c.work() <= 20000) {
      check_attention_finite_differences(c);
      ++fd;
    }
  }
  EXPECT_GE(run, 20);
  EXPECT_GE(fd, 2);
}

// The reference itself: the bf16 variant rounds, the exact one does not, and both see the mask.
TEST(OpHarness, AttentionReferenceRoundsOnlyWhenAsked) {
  const AttnCase c = attn_packed("packed", {0, 5, 12}, 2, 1, 8, true);
  const AttnInputs in = attn_inputs(c);
  const AttnRef exact = attn_reference(c, in, false), lowp = attn_reference(c, in, true);
  int rounded = 0;
  for (size_t i = 0; i < exact.out.size(); ++i) {
    EXPECT_EQ(lowp.out[i], round_bf16(lowp.out[i])) << "bf16 outputs are bf16 values";
    rounded += exact.out[i] != lowp.out[i];
  }
  EXPECT_GT(rounded, 0);
  // A token of document 1 sees nothing of document 0: changing document 0's keys leaves it.
  AttnInputs moved = in;
  for (size_t x = 0; x < static_cast<size_t>(5 * c.Hkv * c.D); ++x) moved.k[x] += 0.5f;
  const AttnRef other = attn_reference(c, moved, false);
  for (size_t x = static_cast<size_t>(5 * c.H * c.D); x < exact.out.size(); ++x) EXPECT_EQ(other.out[x], exact.out[x]);
}

// The window of the reference: a key W or more positions before a query does not reach it, the
// key W - 1 before it does (transformers' kv_idx > q_idx - W).
TEST(OpHarness, AttentionReferenceWindowReachesExactlyWMinusOneBack) {
  AttnCase c = attn_one_doc("one doc", 12, 2, 1, 8, true);
  c.window = 4;
  const AttnInputs in = attn_inputs(c);
  const AttnRef base = attn_reference(c, in, false);
  const int64_t q = 9;  // sees keys 6..9
  for (int64_t key = 0; key < 12; ++key) {
    AttnInputs moved = in;
    for (int64_t x = 0; x < c.Hkv * c.D; ++x) moved.k[static_cast<size_t>(key * c.Hkv * c.D + x)] += 0.5f;
    const AttnRef r = attn_reference(c, moved, false);
    const bool changed = r.out[static_cast<size_t>(q * c.H * c.D)] != base.out[static_cast<size_t>(q * c.H * c.D)];
    EXPECT_EQ(changed, key >= q - 3 && key <= q) << "key " << key;
  }
  EXPECT_TRUE(c.visible(9, 6));
  EXPECT_FALSE(c.visible(9, 5));
}

}  // namespace
}  // namespace seqpar::optest
