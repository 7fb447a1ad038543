// Token ids as a tokenizer.json gives them: parsed as the integers they are (an id of 2^32 used
// to become 0, 2^31 a negative id), refused by name outside [0, 2^31), and bounded by the number
// of ids the file defines (an added token with id 1e8 built dense id tables of gigabytes).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "io/tokenizer.h"
#include "io_test_util.h"
#include "test_util.h"

namespace seqpar {
namespace {

// The GPT-2 fixture with one more added token of the given id (JSON text, to keep it exact).
std::string tokenizer_with_added_id(const std::string& id_text) {
  std::ifstream in(testing::source_path("tests/fixtures/tokenizer/gpt2/tokenizer.json"));
  nlohmann::json j = nlohmann::json::parse(in);
  j["added_tokens"].push_back({{"id", 12345}, {"content", "<|extra|>"}, {"special", true}});
  std::string text = j.dump();
  const std::string marker = "\"id\":12345";
  text.replace(text.find(marker), marker.size(), "\"id\":" + id_text);
  const std::string path = testing::temp_dir() + "/tokenizer.json";
  testing::write_bytes(path, text);
  return path;
}

TEST(TokenizerIds, AnIdOf2To32IsRefusedNotTruncated) {
  EXPECT_INPUT_ERROR(Tokenizer::load(tokenizer_with_added_id("4294967296")),
                     "added_tokens[1] ('<|extra|>') has id 4294967296: an id must be in [0, 2^31)");
  EXPECT_INPUT_ERROR(Tokenizer::load(tokenizer_with_added_id("4294967297")), "has id 4294967297");
  EXPECT_INPUT_ERROR(Tokenizer::load(tokenizer_with_added_id("18446744073709551615")), "has id 18446744073709551615");
}

TEST(TokenizerIds, AnIdOf2To31IsReportedAsItIs) {
  EXPECT_INPUT_ERROR(Tokenizer::load(tokenizer_with_added_id("2147483648")), "has id 2147483648: an id must be in");
  EXPECT_INPUT_ERROR(Tokenizer::load(tokenizer_with_added_id("-1")), "has id -1: an id must be in [0, 2^31)");
}

TEST(TokenizerIds, AFarAwayIdIsRefusedBeforeTheDenseTables) {
  EXPECT_INPUT_ERROR(Tokenizer::load(tokenizer_with_added_id("100000000")),
                     "added_tokens[1] ('<|extra|>') has id 100000000, but the file defines only 702 ids: ids must be "
                     "< 2 x (number of ids) + 1024 = 2428");
}

TEST(TokenizerIds, IdsJustAfterTheVocabularyStillLoad) {
  const auto tok = Tokenizer::load(tokenizer_with_added_id("700"));
  EXPECT_EQ(tok->vocab_size(), 701);
  EXPECT_EQ(tok->token_to_id("<|extra|>"), 700);
  // A reserved range (a hole of 1000 ids) is within the bound.
  EXPECT_EQ(Tokenizer::load(tokenizer_with_added_id("1700"))->vocab_size(), 1701);
}

}  // namespace
}  // namespace seqpar
