// GPT-2's vocab.json + merges.txt (Megatron-DeepSpeed's --vocab-file / --merge-file) against HF's
// GPT2TokenizerFast on the same files (fixtures by tests/fixtures/tokenizer/gen_gpt2_files.py), and
// the files' errors.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/tokenizer.h"
#include "io_test_util.h"
#include "test_util.h"

namespace seqpar {
namespace {

using nlohmann::json;
using testing::read_bytes;
using testing::source_path;
using testing::write_bytes;

#define EXPECT_HAS(haystack, needle) EXPECT_NE((haystack).find(needle), std::string::npos) << (haystack)

const std::string kDir = "tests/fixtures/tokenizer/gpt2_files/";

std::shared_ptr<const Tokenizer> gpt2_files() {
  static const auto t = Tokenizer::load_gpt2_files(source_path(kDir + "vocab.json"), source_path(kDir + "merges.txt"));
  return t;
}

std::string error_of(const std::string& vocab, const std::string& merges) {
  try {
    Tokenizer::load_gpt2_files(vocab, merges);
  } catch (const InputError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an InputError";
  return "";
}

TEST(TokenizerGpt2Files, IdsEqualHuggingFace) {
  const json fx = json::parse(read_bytes(source_path(kDir + "expected.json")));
  const auto tok = gpt2_files();
  EXPECT_EQ(tok->vocab_size(), fx["vocab_size"].get<int64_t>());
  EXPECT_EQ(tok->token_to_id("<|endoftext|>"), fx["eod"].get<int32_t>());
  ASSERT_GE(fx["cases"].size(), 15u);
  for (const json& c : fx["cases"]) {
    const std::string text = c["text"].get<std::string>();
    const std::vector<int32_t> want = c["ids"].get<std::vector<int32_t>>();
    // GPT-2 has no template tokens: the same ids with and without special tokens.
    EXPECT_EQ(tok->encode(text, true), want) << text;
    EXPECT_EQ(tok->encode(text, false), want) << text;
    EXPECT_EQ(tok->decode(want), text) << text;  // byte-level: lossless
  }
}

TEST(TokenizerGpt2Files, SameAsTheTokenizerJsonSpelling) {
  // The same model written as a tokenizer.json (as HF's converter writes GPT-2's) gives the same ids:
  // both spellings share one BPE.
  const json vocab = json::parse(read_bytes(source_path(kDir + "vocab.json")));
  json merges = json::array();
  const std::string text = read_bytes(source_path(kDir + "merges.txt"));
  size_t at = text.find('\n') + 1;  // past "#version"
  while (at < text.size()) {
    const size_t end = text.find('\n', at);
    merges.push_back(text.substr(at, end - at));
    at = end + 1;
  }
  const json root = {{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}},
                     {"added_tokens",
                      json::array({{{"id", vocab["<|endoftext|>"]}, {"content", "<|endoftext|>"}, {"special", true}}})},
                     {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
                     {"decoder", {{"type", "ByteLevel"}}}};
  const std::string dir = testing::temp_dir();
  write_bytes(dir + "/tokenizer.json", root.dump());
  const auto json_tok = Tokenizer::load(dir + "/tokenizer.json");
  const json fx = json::parse(read_bytes(source_path(kDir + "expected.json")));
  for (const json& c : fx["cases"])
    EXPECT_EQ(json_tok->encode(c["text"].get<std::string>()), gpt2_files()->encode(c["text"].get<std::string>()));
}

TEST(TokenizerGpt2Files, ErrorsNameTheFileAndLine) {
  const std::string dir = testing::temp_dir();
  const std::string vocab = source_path(kDir + "vocab.json"), merges = source_path(kDir + "merges.txt");
  EXPECT_HAS(error_of(dir + "/none.json", merges), "--vocab-file '" + dir + "/none.json': no such file");
  EXPECT_HAS(error_of(vocab, dir + "/none.txt"), "--merge-file '" + dir + "/none.txt': no such file");
  write_bytes(dir + "/list.json", "[1, 2]");
  EXPECT_HAS(error_of(dir + "/list.json", merges), "must be a JSON object {token: id} (GPT-2's vocab.json)");
  write_bytes(dir + "/bad.txt", "#version: 0.2\nĠ t\nthree tokens here\n");
  EXPECT_HAS(error_of(vocab, dir + "/bad.txt"),
             "--merge-file '" + dir + "/bad.txt':3: 'three tokens here' must be two tokens separated by one space");
  // A merge whose parts the vocabulary lacks: the BPE's own check, as for tokenizer.json.
  write_bytes(dir + "/unknown.txt", "#version: 0.2\nzz qq\n");
  EXPECT_HAS(error_of(vocab, dir + "/unknown.txt"), "model.merges[0] ('zz', 'qq'): 'zz' is not in the vocabulary");
  // The #version line is optional (tokenizers skips it only when it is there).
  write_bytes(dir + "/noversion.txt", read_bytes(merges).substr(read_bytes(merges).find('\n') + 1));
  const auto t = Tokenizer::load_gpt2_files(vocab, dir + "/noversion.txt");
  EXPECT_EQ(t->encode("Hello world"), gpt2_files()->encode("Hello world"));
}

}  // namespace
}  // namespace seqpar
