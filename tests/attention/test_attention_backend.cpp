// Attention backend names, Hugging Face attn_implementation mapping, and the rule that decides
// when cuDNN's SDPA computes exactly attention.h's mask (packed_docs), on the CPU.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "attention/attention_backend.h"
#include "attention_test_util.h"
#include "core/error.h"

namespace seqpar {
namespace {

using testing::make_meta;

TEST(AttentionBackend, ParsesBackendNames) {
  EXPECT_EQ(parse_attention_backend("flash"), AttentionBackend::kFlash);
  EXPECT_EQ(parse_attention_backend("cudnn"), AttentionBackend::kCudnn);
  EXPECT_EQ(parse_attention_backend("auto"), AttentionBackend::kAuto);
  for (AttentionBackend b : {AttentionBackend::kFlash, AttentionBackend::kCudnn, AttentionBackend::kAuto})
    EXPECT_EQ(parse_attention_backend(attention_backend_name(b)), b);
  try {
    parse_attention_backend("cuDNN");
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("'cuDNN' is not one of flash, cudnn, auto"), std::string::npos) << e.what();
  }
}

TEST(AttentionBackend, MapsHuggingFaceAttnImplementation) {
  EXPECT_EQ(parse_attn_implementation("sdpa"), AttentionBackend::kAuto);
  EXPECT_EQ(parse_attn_implementation("flash_attention_2"), AttentionBackend::kFlash);
  EXPECT_EQ(parse_attn_implementation("flash_attention_3"), AttentionBackend::kFlash);
  try {
    parse_attn_implementation("eager");
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("attn_implementation='eager'"), std::string::npos) << m;
    EXPECT_NE(m.find("[S, S]"), std::string::npos) << m;
  }
  for (const char* bad : {"flex_attention", "", "SDPA"}) {
    try {
      parse_attn_implementation(bad);
      FAIL() << "expected an InputError for '" << bad << "'";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("use sdpa, flash_attention_2 or flash_attention_3"), std::string::npos)
          << e.what();
    }
  }
}

AttnArgs same_set(const TokenMeta& m, bool causal) { return AttnArgs{m, m, causal, 0.125f}; }

TEST(AttentionBackend, PackedDocsFromContiguousDocuments) {
  // What the data pipeline makes: three documents, then padding as a segment of its own; pos is
  // the global token index.
  const TokenMeta m = token_meta_from_cu_seqlens({0, 5, 6, 14, 16});
  for (bool causal : {true, false}) {
    std::string why;
    const auto docs = packed_docs(same_set(m, causal), 16, 16, &why);
    ASSERT_TRUE(docs.has_value()) << why;
    EXPECT_EQ(docs->cu, (std::vector<int32_t>{0, 5, 6, 14, 16}));
    EXPECT_EQ(docs->max_len, 8);
    EXPECT_EQ(docs->num_docs(), 4);
  }
  // One sequence.
  const auto one = packed_docs(same_set(token_meta_from_cu_seqlens({0, 7}), true), 7, 7);
  ASSERT_TRUE(one.has_value());
  EXPECT_EQ(one->cu, (std::vector<int32_t>{0, 7}));
  EXPECT_EQ(one->max_len, 7);
}

TEST(AttentionBackend, PackedDocsAcceptsEqualCopiesAndGappedPositions) {
  // Distinct but equal tensors for q and k (what concat_token_meta gives each side); positions
  // that jump (a shard of a longer sequence) but increase inside each document.
  const std::vector<int32_t> seg = {3, 3, 3, 9, 9}, pos = {10, 11, 40, 41, 50};
  const AttnArgs args{make_meta(seg, pos), make_meta(seg, pos), true, 0.125f};
  std::string why;
  const auto docs = packed_docs(args, 5, 5, &why);
  ASSERT_TRUE(docs.has_value()) << why;
  EXPECT_EQ(docs->cu, (std::vector<int32_t>{0, 3, 5}));
  EXPECT_EQ(docs->max_len, 3);
}

// A sliding window never reaches cuDNN: the dispatcher runs windowed calls on the flash kernel.
TEST(AttentionBackend, PackedDocsRefusesWindowedCalls) {
  const TokenMeta m = token_meta_from_cu_seqlens({0, 5, 16});
  AttnArgs args = same_set(m, true);
  ASSERT_TRUE(packed_docs(args, 16, 16).has_value());
  args.window = 4;
  std::string why;
  EXPECT_FALSE(packed_docs(args, 16, 16, &why).has_value());
  EXPECT_NE(why.find("sliding window (window=4)"), std::string::npos) << why;
}

TEST(AttentionBackend, PackedDocsRefusesWhatCudnnCannotExpress) {
  std::string why;
  // Different token sets: a ring step (queries against another rank's keys).
  const TokenMeta a = make_meta({0, 0, 0, 0}, {0, 1, 2, 3});
  const TokenMeta b = make_meta({0, 0, 0, 0}, {4, 5, 6, 7});
  EXPECT_FALSE(packed_docs(AttnArgs{a, b, true, 1.f}, 4, 4, &why).has_value());
  EXPECT_NE(why.find("different token sets"), std::string::npos) << why;
  EXPECT_FALSE(packed_docs(AttnArgs{a, a.rows(0, 3), true, 1.f}, 4, 3, &why).has_value());
  EXPECT_NE(why.find("Tq=4 != Tk=3"), std::string::npos) << why;
  // A document split in two runs (seg goes back down).
  const TokenMeta split = make_meta({0, 0, 1, 0}, {0, 1, 2, 3});
  EXPECT_FALSE(packed_docs(same_set(split, false), 4, 4, &why).has_value());
  EXPECT_NE(why.find("seg decreases at token 3"), std::string::npos) << why;
  // Zigzag order inside one document: causal by pos is not causal by index...
  const TokenMeta zigzag = make_meta({0, 0, 0, 0}, {0, 1, 6, 7}), swapped = make_meta({0, 0, 0, 0}, {0, 6, 1, 7});
  EXPECT_TRUE(packed_docs(same_set(zigzag, true), 4, 4).has_value());  // gaps alone are fine
  EXPECT_FALSE(packed_docs(same_set(swapped, true), 4, 4, &why).has_value());
  EXPECT_NE(why.find("pos does not increase at token 2"), std::string::npos) << why;
  // ...but without the causal mask pos does not matter.
  EXPECT_TRUE(packed_docs(same_set(swapped, false), 4, 4).has_value());
  // Metadata of the wrong type.
  const TokenMeta f32_seg{Tensor::zeros({4}, DType::kF32), a.pos};
  EXPECT_FALSE(packed_docs(same_set(f32_seg, true), 4, 4, &why).has_value());
  EXPECT_NE(why.find("q_meta.seg is not i32 [4]"), std::string::npos) << why;
  // No tokens.
  const TokenMeta none = token_meta_from_cu_seqlens({0});
  EXPECT_FALSE(packed_docs(same_set(none, true), 0, 0, &why).has_value());
}

// auto's per-direction rule: the sm_90 kernel for the forward at D 128 and the backward at D 64, causal, long enough,
// on compute capability 9.0 only; cuDNN for everything else.
TEST(AttentionBackend, AutoRunsOwnKernelOnlyWhereMeasuredFaster) {
  constexpr int64_t L = kAutoOwnKernelMinTokens;
  const auto fwd = AttnDirection::kForward, bwd = AttnDirection::kBackward;
  EXPECT_TRUE(auto_runs_own_kernel(fwd, 128, L, true, 90));
  EXPECT_TRUE(auto_runs_own_kernel(fwd, 128, 8 * L, true, 90));
  EXPECT_TRUE(auto_runs_own_kernel(bwd, 64, L, true, 90));
  EXPECT_FALSE(auto_runs_own_kernel(bwd, 128, 8 * L, true, 90));  // cuDNN's D 128 backward is faster
  EXPECT_FALSE(auto_runs_own_kernel(fwd, 64, 8 * L, true, 90));   // and its D 64 forward
  for (int64_t D : {64, 96, 128}) {
    for (auto dir : {fwd, bwd}) {
      EXPECT_FALSE(auto_runs_own_kernel(dir, D, L - 1, true, 90)) << D;  // shorter than measured
      EXPECT_FALSE(auto_runs_own_kernel(dir, D, 4 * L, false, 90)) << D;  // non-causal: not measured
      for (int cc : {80, 89, 100, 120})  // the sm_90 kernels run on 9.0 only
        EXPECT_FALSE(auto_runs_own_kernel(dir, D, 4 * L, true, cc)) << D << " " << cc;
    }
    if (D == 96) {
      EXPECT_FALSE(auto_runs_own_kernel(fwd, D, 4 * L, true, 90));
      EXPECT_FALSE(auto_runs_own_kernel(bwd, D, 4 * L, true, 90));
    }
  }
}

}  // namespace
}  // namespace seqpar
