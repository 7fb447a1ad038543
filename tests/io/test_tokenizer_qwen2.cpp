// A Qwen2-style tokenizer.json (Split with the Qwen2 regex: digits one by one, then ByteLevel; its
// special tokens) against HF on a corpus with CJK, emoji, recent Unicode, digits and whitespace
// runs (tests/fixtures/tokenizer/gen_qwen2.py).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "io/tokenizer.h"
#include "io_test_util.h"
#include "test_util.h"

namespace seqpar {
namespace {

using nlohmann::json;
using testing::read_bytes;
using testing::source_path;

const std::string kDir = "tests/fixtures/tokenizer/qwen2/";

TEST(TokenizerQwen2, IdsEqualHuggingFace) {
  const auto tok = Tokenizer::load(source_path(kDir + "tokenizer.json"));
  const json fx = json::parse(read_bytes(source_path(kDir + "expected.json")));
  ASSERT_GE(fx["corpus"].size(), 12u);
  for (const json& c : fx["corpus"]) {
    const std::string text = c["text"].get<std::string>();
    const std::vector<int32_t> want = c["ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(tok->encode(text), want) << text;  // Qwen2 has no template tokens (no BOS)
    EXPECT_EQ(tok->decode(want), text) << text;
  }
  // The special tokens are single ids, matched in the text.
  for (const char* t : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}) {
    ASSERT_TRUE(tok->token_to_id(t).has_value()) << t;
    EXPECT_EQ(tok->encode(t), std::vector<int32_t>{*tok->token_to_id(t)}) << t;
  }
  // Digits one by one (Qwen2's \p{N}, where Llama-3 takes up to three).
  const std::vector<int32_t> digits = tok->encode("2024");
  EXPECT_EQ(digits.size(), 4u);
}

}  // namespace
}  // namespace seqpar
