// --tokenizer DIR: a model directory gives its tokenizer.json, else tokenizer.model, else GPT-2's
// vocab.json + merges.txt; a tiktoken file and a vocab.json without merges are refused by name.
#include <gtest/gtest.h>

#include <filesystem>

#include "io/tokenizer.h"
#include "io_test_util.h"
#include "test_util.h"

namespace seqpar {
namespace {

namespace fs = std::filesystem;
using testing::source_path;

const std::string kDir = "tests/fixtures/tokenizer/";

TEST(TokenizerDir, ADirectoryGivesItsTokenizerJson) {
  const std::string dir = source_path(kDir + "qwen2");
  const auto from_dir = Tokenizer::load(dir);
  EXPECT_EQ(fs::path(from_dir->path()).filename(), "tokenizer.json");
  const auto from_file = Tokenizer::load(dir + "/tokenizer.json");
  const std::string text = "Hello world <|im_end|> 中文 2024";
  EXPECT_EQ(from_dir->encode(text), from_file->encode(text));
  // Its tokenizer_config.json is the one in the directory.
  EXPECT_EQ(read_tokenizer_config(dir).eos_token, "<|im_end|>");
}

TEST(TokenizerDir, TokenizerJsonBeforeTokenizerModel) {
  const std::string dir = testing::temp_dir() + "/both";
  fs::create_directories(dir);
  fs::copy_file(source_path(kDir + "gpt2/tokenizer.json"), dir + "/tokenizer.json");
  fs::copy_file(source_path(kDir + "sentencepiece/tokenizer.model"), dir + "/tokenizer.model");
  EXPECT_EQ(Tokenizer::resolve(dir), dir + "/tokenizer.json");
  fs::remove(dir + "/tokenizer.json");
  EXPECT_EQ(Tokenizer::resolve(dir), dir + "/tokenizer.model");
  if (tokenizer_detail::sentencepiece_available()) {
    EXPECT_EQ(Tokenizer::load(dir)->encode("Hello world"),
              Tokenizer::load(source_path(kDir + "sentencepiece/tokenizer.model"))->encode("Hello world"));
  }
}

TEST(TokenizerDir, Gpt2FilesInADirectory) {
  const std::string dir = source_path(kDir + "gpt2_files");
  const auto tok = Tokenizer::load(dir);
  const auto files = Tokenizer::load_gpt2_files(dir + "/vocab.json", dir + "/merges.txt");
  const std::string text = "Hello world, it's 12345!<|endoftext|>";
  EXPECT_EQ(tok->encode(text), files->encode(text));
  EXPECT_TRUE(tok->token_to_id("<|endoftext|>").has_value());
}

TEST(TokenizerDir, WhatIsNotATokenizerIsNamed) {
  const std::string dir = testing::temp_dir() + "/vocab_only";
  fs::create_directories(dir);
  fs::copy_file(source_path(kDir + "gpt2_files/vocab.json"), dir + "/vocab.json");
  EXPECT_INPUT_ERROR(Tokenizer::load(dir), "the directory has a vocab.json but no merges.txt");
  EXPECT_INPUT_ERROR(Tokenizer::load(dir + "/vocab.json"), "is a vocab.json alone: a GPT-2 BPE needs its merges.txt");
  fs::remove(dir + "/vocab.json");
  EXPECT_INPUT_ERROR(Tokenizer::load(dir), "the directory has no tokenizer.json, tokenizer.model, or vocab.json");
  // Llama-3's original/tokenizer.model: tiktoken's base64 token + rank lines.
  testing::write_bytes(dir + "/tokenizer.model", "IQ== 0\nIg== 1\nIw== 2\n");
  EXPECT_INPUT_ERROR(Tokenizer::load(dir), "is a tiktoken BPE file (a base64 token and its rank per line");
  EXPECT_INPUT_ERROR(Tokenizer::load(dir + "/tokenizer.model"), "pass the model's Hugging Face tokenizer.json");
  EXPECT_INPUT_ERROR(Tokenizer::load(dir + "/nothing"), "no such file or directory");
}

}  // namespace
}  // namespace seqpar
