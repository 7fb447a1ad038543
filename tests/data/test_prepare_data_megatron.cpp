// prepare-data as Megatron-DeepSpeed's preprocess_data.py is used: GPT-2's vocab.json + merges.txt
// (--vocab-file / --merge-file) and --append-eod, the documents concatenated with the end-of-text
// token between them; the stream equals HF's ids (tests/fixtures/tokenizer/gen_gpt2_files.py).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/prepare_data.h"
#include "data/token_file.h"
#include "io/tokenizer.h"
#include "test_util.h"

namespace seqpar {
namespace {

using testing::read_file;
using testing::write_file;

using nlohmann::json;
using testing::source_path;

const std::string kDir = "tests/fixtures/tokenizer/gpt2_files/";

// The fixture's documents as Megatron's input: one {"text": ...} JSON object a line.
std::string docs_jsonl(const json& fx) {
  std::string out;
  for (const json& d : fx["docs"]) out += json{{"text", d}}.dump() + "\n";
  return out;
}

TEST(PrepareDataMegatron, VocabAndMergesWithAppendEodEqualHuggingFace) {
  const json fx = json::parse(read_file(source_path(kDir + "expected.json")));
  const std::string dir = testing::temp_dir();
  write_file(dir + "/corpus.jsonl", docs_jsonl(fx));
  PrepareDataOptions o;
  o.vocab_file = source_path(kDir + "vocab.json");
  o.merge_file = source_path(kDir + "merges.txt");
  o.inputs = {dir + "/corpus.jsonl"};
  o.output = dir + "/tokens.bin";
  o.format = DataFormat::kJsonl;
  o.append_eos = true;  // --append-eod: <|endoftext|>, with no tokenizer_config.json to name another
  o.threads = 2;
  o.progress = false;
  const PrepareDataStats s = prepare_data(o);
  TokenFile f(o.output);
  ASSERT_EQ(f.num_docs(), static_cast<int64_t>(fx["docs"].size()));
  std::vector<int32_t> stream;
  for (int64_t d = 0; d < f.num_docs(); ++d) {
    const auto ids = f.doc_tokens(d);
    EXPECT_EQ(ids.back(), fx["eod"].get<int32_t>()) << d;
    stream.insert(stream.end(), ids.begin(), ids.end());
  }
  EXPECT_EQ(stream, fx["append_eod_stream"].get<std::vector<int32_t>>());
  EXPECT_EQ(s.tokens, static_cast<int64_t>(stream.size()));
}

TEST(PrepareDataMegatron, CommandLineTakesMegatronsFlagNames) {
  const json fx = json::parse(read_file(source_path(kDir + "expected.json")));
  const std::string dir = testing::temp_dir();
  write_file(dir + "/corpus.jsonl", docs_jsonl(fx));
  const std::string files =
      " --vocab-file " + source_path(kDir + "vocab.json") + " --merge-file " + source_path(kDir + "merges.txt");
  std::string out;
  const std::string cmd = testing::binary_path() + " prepare-data" + files + " --input " + dir +
                          "/corpus.jsonl --output " + dir + "/t.bin --workers 2 --append-eod --quiet";
  ASSERT_EQ(testing::run_command(cmd, &out), 0) << out;
  TokenFile f(dir + "/t.bin");
  std::vector<int32_t> stream;
  for (int64_t d = 0; d < f.num_docs(); ++d) {
    const auto ids = f.doc_tokens(d);
    stream.insert(stream.end(), ids.begin(), ids.end());
  }
  EXPECT_EQ(stream, fx["append_eod_stream"].get<std::vector<int32_t>>());
  // A tokenizer named twice, or half of GPT-2's pair, is refused by name.
  const std::string base =
      testing::binary_path() + " prepare-data --input " + dir + "/corpus.jsonl --output " + dir + "/u.bin --quiet";
  EXPECT_NE(testing::run_command(base + files + " --tokenizer " + source_path(kDir + "vocab.json"), &out), 0);
  EXPECT_NE(out.find("and --vocab-file/--merge-file both name a tokenizer: give one of them"), std::string::npos)
      << out;
  EXPECT_NE(testing::run_command(base + " --vocab-file " + source_path(kDir + "vocab.json"), &out), 0);
  EXPECT_NE(out.find("--vocab-file and --merge-file go together (GPT-2's vocab.json and merges.txt): --merge-file "
                     "is missing"),
            std::string::npos)
      << out;
  EXPECT_NE(testing::run_command(base, &out), 0);
  EXPECT_NE(out.find("--tokenizer: a tokenizer is needed"), std::string::npos) << out;
  EXPECT_FALSE(std::filesystem::exists(dir + "/u.bin"));
}

}  // namespace
}  // namespace seqpar
