// The tokenizer against Hugging Face `tokenizers` (fixtures by tools/make_tokenizer_fixtures.py):
// identical pre-tokenizer pieces and ids, lossless decode, offsets, and the errors.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <fstream>
#include <functional>
#include <algorithm>
#include <map>
#include <set>
#include <thread>

#include "io/tokenizer.h"
#include "io_test_util.h"
#include "test_util.h"

namespace seqpar {
namespace {

using nlohmann::json;
using testing::read_bytes;
using testing::source_path;
using testing::write_bytes;
namespace td = tokenizer_detail;

const std::string kDir = "tests/fixtures/tokenizer/";

json load_json(const std::string& rel) { return json::parse(read_bytes(source_path(rel))); }

std::shared_ptr<const Tokenizer> fixture(const std::string& name) {
  static std::map<std::string, std::shared_ptr<const Tokenizer>> cache;
  auto& t = cache[name];
  if (!t) t = Tokenizer::load(source_path(kDir + name + (name == "sentencepiece" ? "/tokenizer.model" : "/tokenizer.json")));
  return t;
}

TEST(Tokenizer, UnicodeClasses) {
  using td::CharClass;
  EXPECT_EQ(td::char_class(U'a'), CharClass::kLetter);
  EXPECT_EQ(td::char_class(U'ǅ'), CharClass::kLetter);   // Lt
  EXPECT_EQ(td::char_class(U'中'), CharClass::kLetter);  // Lo
  EXPECT_EQ(td::char_class(U'ʰ'), CharClass::kLetter);   // Lm
  EXPECT_EQ(td::char_class(U'7'), CharClass::kNumber);
  EXPECT_EQ(td::char_class(U'٣'), CharClass::kNumber);  // Nd
  EXPECT_EQ(td::char_class(U'Ⅻ'), CharClass::kNumber);  // Nl
  EXPECT_EQ(td::char_class(U'½'), CharClass::kNumber);  // No
  EXPECT_EQ(td::char_class(U' '), CharClass::kSpace);
  EXPECT_EQ(td::char_class(U'\u0085'), CharClass::kSpace);
  EXPECT_EQ(td::char_class(U'\u3000'), CharClass::kSpace);
  EXPECT_EQ(td::char_class(U'\u001c'), CharClass::kOther);  // isspace() in python, not White_Space
  EXPECT_EQ(td::char_class(U'\u200b'), CharClass::kOther);
  EXPECT_EQ(td::char_class(U'\u0301'), CharClass::kOther);  // Mn
  EXPECT_EQ(td::char_class(U'😀'), CharClass::kOther);
  EXPECT_EQ(td::char_class(U'_'), CharClass::kOther);
  EXPECT_EQ(td::char_class(0x10FFFF), CharClass::kOther);
  // Unicode 15.0 (utf8proc 2.8): Kawi, CJK Extension H, Nag Mundari, a new emoji.
  EXPECT_EQ(td::char_class(0x11F04), CharClass::kLetter);  // KAWI LETTER A (Lo)
  EXPECT_EQ(td::char_class(0x11F00), CharClass::kOther);   // KAWI SIGN CANDRABINDU (Mn)
  EXPECT_EQ(td::char_class(0x11F50), CharClass::kNumber);  // KAWI DIGIT ZERO (Nd)
  EXPECT_EQ(td::char_class(0x31350), CharClass::kLetter);  // CJK Extension H (Lo)
  EXPECT_EQ(td::char_class(0x1E4D0), CharClass::kLetter);  // NAG MUNDARI LETTER O (Lo)
  EXPECT_EQ(td::char_class(0x1FAE8), CharClass::kOther);   // SHAKING FACE (So)
  EXPECT_GE(std::string(td::unicode_version()), "15.0.0");
}

TEST(Tokenizer, WordChars) {  // Rust regex \w
  for (char32_t c : {U'a', U'中', U'7', U'_', U'\u0301', U'\u200d', U'Ⅻ', U'\u24b6'})
    EXPECT_TRUE(td::word_char(c)) << static_cast<uint32_t>(c);
  for (char32_t c : {U' ', U'-', U'½', U'😀', U'\u200b'}) EXPECT_FALSE(td::word_char(c)) << static_cast<uint32_t>(c);
}

TEST(Tokenizer, Utf8Validation) {
  std::vector<char32_t> cps;
  std::vector<size_t> offs;
  td::decode_utf8("a\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80", cps, offs);
  EXPECT_EQ(cps, (std::vector<char32_t>{U'a', U'é', U'中', U'😀'}));
  EXPECT_EQ(offs, (std::vector<size_t>{0, 1, 3, 6, 10}));
  EXPECT_INPUT_ERROR(td::decode_utf8("ab\xC0\x80", cps, offs), "invalid UTF-8 at byte 2");
  EXPECT_INPUT_ERROR(td::decode_utf8("\xE0\x80\x80", cps, offs), "invalid UTF-8 at byte 0");          // overlong
  EXPECT_INPUT_ERROR(td::decode_utf8("x\xED\xA0\x80", cps, offs), "U+D800");                          // surrogate
  EXPECT_INPUT_ERROR(td::decode_utf8("\xF4\x90\x80\x80", cps, offs), "U+110000");                     // > U+10FFFF
  EXPECT_INPUT_ERROR(td::decode_utf8("abc\xE4\xB8", cps, offs), "cut by the end of the text");
  EXPECT_INPUT_ERROR(td::decode_utf8("\xE4" "ab", cps, offs), "byte 1 of the text: byte 0x61 is not a continuation byte");
  EXPECT_INPUT_ERROR(fixture("llama3")->encode("ok \xFF"), "invalid UTF-8 at byte 3");
  EXPECT_NO_THROW(td::validate_utf8("a\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80"));
  EXPECT_INPUT_ERROR(td::validate_utf8("ab\xC0\x80"), "invalid UTF-8 at byte 2");
  EXPECT_INPUT_ERROR(td::validate_utf8("x\xED\xA0\x80"), "U+D800");
}

TEST(Tokenizer, ByteLevelAlphabet) {
  EXPECT_EQ(td::byte_to_unicode(' '), U'Ġ');
  EXPECT_EQ(td::byte_to_unicode('\n'), U'Ċ');
  EXPECT_EQ(td::byte_to_unicode(0), U'\u0100');
  EXPECT_EQ(td::byte_to_unicode('a'), U'a');
  EXPECT_EQ(td::byte_to_unicode(0xAD), U'\u0143');
  EXPECT_EQ(td::byte_to_unicode(0xFF), U'ÿ');
  std::set<char32_t> seen;
  for (int b = 0; b < 256; ++b) seen.insert(td::byte_to_unicode(static_cast<uint8_t>(b)));
  EXPECT_EQ(seen.size(), 256u);  // a bijection
}

TEST(Tokenizer, SplitPatternsRecognised) {
  const json pre = load_json(kDir + "llama3/tokenizer.json")["pre_tokenizer"];
  auto p = td::split_pattern_from_regex(pre["pretokenizers"][0]["pattern"]["Regex"].get<std::string>());
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(*p, td::SplitPattern::kLlama3);
  EXPECT_FALSE(td::split_pattern_from_regex("\\s+").has_value());
}

// HF's Split(pattern, Isolated) pieces on random strings over the classes the regexes care about.
TEST(Tokenizer, PreTokenizerMatchesHuggingFace) {
  const json fx = load_json(kDir + "pretokens.json");
  std::map<std::string, td::SplitPattern> by_name{
      {"gpt2", td::SplitPattern::kGpt2}, {"llama3", td::SplitPattern::kLlama3}, {"qwen2", td::SplitPattern::kQwen2}};
  int checked = 0;
  for (const auto& c : fx["cases"]) {
    const std::string text = c["text"];
    std::vector<char32_t> cps;
    std::vector<size_t> offs;
    td::decode_utf8(text, cps, offs);
    std::vector<std::string> got;
    for (auto [b, e] : td::split_pretokens(cps, by_name.at(c["pattern"])))
      got.push_back(text.substr(offs[b], offs[e] - offs[b]));
    EXPECT_EQ(got, c["pieces"].get<std::vector<std::string>>()) << c["pattern"] << " on " << c["text"].dump();
    ++checked;
  }
  EXPECT_GT(checked, 900);
}

TEST(Tokenizer, EncodeMatchesHuggingFace) {
  const json fx = load_json(kDir + "expected.json");
  int checked = 0;
  for (const auto& c : fx["cases"]) {
    if (c["tokenizer"] == "sentencepiece" && !td::sentencepiece_available()) continue;  // see SentencePiece below
    const auto tok = fixture(c["tokenizer"]);
    const std::string text = c["text"];
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    const auto plain = c["ids_plain"].get<std::vector<int32_t>>();
    EXPECT_EQ(tok->encode(text, true), ids) << c["tokenizer"] << " on " << c["text"].dump();
    std::vector<int64_t> starts;
    ASSERT_EQ(tok->encode(text, false, &starts), plain) << c["tokenizer"] << " on " << c["text"].dump();
    EXPECT_EQ(tok->decode(plain), c["decoded"].get<std::string>()) << c["text"].dump();
    // Offsets: non-decreasing, and when decoding is lossless, the tokens before token k decode
    // to exactly the text before starts[k].
    ASSERT_EQ(starts.size(), plain.size());
    // (The prefix property holds for byte-level BPE; SentencePiece drops the dummy-prefix space.)
    const bool lossless = c["decoded"].get<std::string>() == text && c["tokenizer"] != "gpt2_prefix" &&
                          c["tokenizer"] != "sentencepiece";
    for (size_t k = 0; k < starts.size(); ++k) {
      ASSERT_GE(starts[k], k ? starts[k - 1] : 0);
      ASSERT_LE(starts[k], static_cast<int64_t>(text.size()));
      if (lossless) {
        EXPECT_EQ(tok->decode(std::vector<int32_t>(plain.begin(), plain.begin() + static_cast<long>(k))),
                  text.substr(0, static_cast<size_t>(starts[k])))
            << "token " << k << " of " << c["text"].dump();
      }
    }
    ++checked;
  }
  EXPECT_GT(checked, 500);
}

TEST(Tokenizer, TemplateAndSpecialTokens) {
  const auto tok = fixture("llama3");
  const int32_t bos = *tok->token_to_id("<|begin_of_text|>");
  EXPECT_EQ(tok->vocab_size(), 1104);
  EXPECT_EQ(tok->encode("").size(), 1u);
  EXPECT_EQ(tok->encode("")[0], bos);
  EXPECT_TRUE(tok->encode("", false).empty());
  // Special tokens in the text are matched whole, before pre-tokenisation.
  const auto ids = tok->encode("a<|eot_id|>b", false);
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(ids[1], *tok->token_to_id("<|eot_id|>"));
  EXPECT_EQ(tok->decode(ids, /*skip_special_tokens=*/true), "ab");
  EXPECT_EQ(tok->decode(ids), "a<|eot_id|>b");
  EXPECT_FALSE(tok->token_to_id("no such token").has_value());
  EXPECT_INPUT_ERROR(tok->decode({5, 1104}), "cannot decode token id 1104");
  EXPECT_INPUT_ERROR(tok->decode({-1}), "cannot decode token id -1");
  EXPECT_NE(tok->summary().find("split(llama3) + byte-level"), std::string::npos) << tok->summary();
  EXPECT_NE(tok->summary().find("<|begin_of_text|> $A"), std::string::npos) << tok->summary();
  EXPECT_TRUE(fixture("gpt2")->encode("hi", true) == fixture("gpt2")->encode("hi", false));  // no template
}

TEST(Tokenizer, ConcurrentEncodeIsDeterministic) {
  const auto tok = fixture("llama3");
  const json fx = load_json(kDir + "expected.json");
  std::vector<std::string> texts;
  for (const auto& c : fx["cases"])
    if (c["tokenizer"] == "llama3") texts.push_back(c["text"]);
  std::vector<std::vector<int32_t>> want;
  for (const auto& t : texts) want.push_back(tok->encode(t));
  std::vector<int> bad(4, 0);
  std::vector<std::thread> threads;
  for (int w = 0; w < 4; ++w)
    threads.emplace_back([&, w] {
      for (int rep = 0; rep < 3; ++rep)
        for (size_t i = 0; i < texts.size(); ++i) bad[static_cast<size_t>(w)] += tok->encode(texts[i]) != want[i];
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(bad, std::vector<int>(4, 0));
}

// ---- unsupported components: each error names the component and its type -------------------

std::string variant(const std::function<void(json&)>& edit) {
  json j = load_json(kDir + "llama3/tokenizer.json");
  edit(j);
  const std::string path = testing::temp_dir() + "/tokenizer.json";
  write_bytes(path, j.dump());
  return path;
}

TEST(Tokenizer, UnsupportedComponentsAreNamed) {
  EXPECT_INPUT_ERROR(Tokenizer::load(variant([](json& j) {
                       j["normalizer"] = {{"type", "Lowercase"}};
                     })),
                     "normalizer type 'Lowercase' is not supported (supported: NFC, NFD, NFKC, NFKD, Prepend, Replace");
  EXPECT_INPUT_ERROR(
      Tokenizer::load(variant([](json& j) {
        j["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "NFC"}}, {{"type", "Precompiled"}}}}};
      })),
      "normalizer.normalizers[1] type 'Precompiled' is not supported");
  EXPECT_INPUT_ERROR(Tokenizer::load(variant([](json& j) {
                       j["normalizer"] = {{"type", "Replace"}, {"pattern", {{"Regex", " +"}}}, {"content", " "}};
                     })),
                     "normalizer Replace with pattern {\"Regex\":\" +\"} is not supported (only a String pattern)");
  EXPECT_INPUT_ERROR(Tokenizer::load(variant([](json& j) { j["model"]["type"] = "Unigram"; })),
                     "model type 'Unigram' is not supported");
  EXPECT_INPUT_ERROR(Tokenizer::load(variant([](json& j) { j["pre_tokenizer"] = {{"type", "Whitespace"}}; })),
                     "pre-tokenizer type 'Whitespace' is not supported");
  EXPECT_INPUT_ERROR(
      Tokenizer::load(variant([](json& j) {
        j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", {{{"type", "ByteLevel"}}, {{"type", "Digits"}}}}};
      })),
      "pre-tokenizer 'Digits' after ByteLevel is not supported");
  EXPECT_INPUT_ERROR(Tokenizer::load(variant([](json& j) {
                       j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\p{L}+";
                     })),
                     "pre-tokenizer Split regex '\\p{L}+' is not supported");
  EXPECT_INPUT_ERROR(Tokenizer::load(variant([](json& j) {
                       j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed";
                     })),
                     "Split with behavior 'Removed'");
  EXPECT_INPUT_ERROR(Tokenizer::load(variant([](json& j) {
                       j["post_processor"] = {{"type", "RobertaProcessing"}};
                     })),
                     "post_processor type 'RobertaProcessing' is not supported");
  EXPECT_INPUT_ERROR(Tokenizer::load(variant([](json& j) { j["model"]["merges"][3] = {"Ġ", "no-such-token"}; })),
                     "model.merges[3] ('Ġ', 'no-such-token'): 'no-such-token' is not in the vocabulary");
  EXPECT_INPUT_ERROR(Tokenizer::load(variant([](json& j) { j["model"]["merges"][0] = "a b c"; })),
                     "model.merges[0] = 'a b c' must be two tokens");
  // The decoder is only needed to decode: encoding still works.
  auto tok = Tokenizer::load(variant([](json& j) { j["decoder"] = {{"type", "CTC"}}; }));
  EXPECT_FALSE(tok->encode("hello").empty());
  EXPECT_INPUT_ERROR(tok->decode({1}), "decoder type 'CTC' is not supported");
  EXPECT_INPUT_ERROR(Tokenizer::load(variant([](json& j) {
                       j["decoder"] = {{"type", "Metaspace"}};
                     }))->decode({1}),
                     "decoder Metaspace needs a string 'replacement'");
  // Merges in the older "a b" spelling give the same ids.
  auto legacy = Tokenizer::load(variant([](json& j) {
    for (auto& m : j["model"]["merges"]) m = m[0].get<std::string>() + " " + m[1].get<std::string>();
  }));
  EXPECT_EQ(legacy->encode("Hello world, it's 12345!"), fixture("llama3")->encode("Hello world, it's 12345!"));
  EXPECT_INPUT_ERROR(Tokenizer::load("/nonexistent/tokenizer.json"), "no such file");
  const std::string garbage = testing::temp_dir() + "/tokenizer.json";
  write_bytes(garbage, "{not json");
  EXPECT_INPUT_ERROR(Tokenizer::load(garbage), "not valid JSON");
}

// Llama-2 style SentencePiece (BPE with byte fallback): ids checked against the python
// sentencepiece package in EncodeMatchesHuggingFace; here BOS, lookups and the build switch.
TEST(Tokenizer, SentencePiece) {
  const std::string path = source_path(kDir + "sentencepiece/tokenizer.model");
  if (!td::sentencepiece_available()) {
    EXPECT_INPUT_ERROR(Tokenizer::load(path), "SentencePiece models are not supported by this build");
    return;
  }
  const auto tok = Tokenizer::load(path);
  EXPECT_EQ(tok->vocab_size(), 600);
  const int32_t bos = *tok->token_to_id("<s>");
  const auto ids = tok->encode("Hello world 中文");
  ASSERT_GT(ids.size(), 2u);
  EXPECT_EQ(ids[0], bos);
  EXPECT_EQ(std::vector<int32_t>(ids.begin() + 1, ids.end()), tok->encode("Hello world 中文", false));
  EXPECT_EQ(tok->decode(ids), "Hello world 中文");
  EXPECT_FALSE(tok->token_to_id("no such piece").has_value());
  EXPECT_INPUT_ERROR(tok->decode({600}), "cannot decode token id 600");
  EXPECT_INPUT_ERROR(tok->encode("\xC3"), "invalid UTF-8 at byte 0");
  std::vector<int64_t> starts;
  tok->encode("ab cd", false, &starts);
  EXPECT_EQ(starts.front(), 0);
  EXPECT_TRUE(std::is_sorted(starts.begin(), starts.end()));
  const std::string garbage = testing::temp_dir() + "/tokenizer.model";
  write_bytes(garbage, "not a model");
  EXPECT_INPUT_ERROR(Tokenizer::load(garbage), "not a SentencePiece model");
}

TEST(Tokenizer, TokenizerConfig) {
  const TokenizerConfig cfg = read_tokenizer_config(source_path(kDir + "llama3/tokenizer.json"));
  EXPECT_EQ(cfg.bos_token.value_or(""), "<|begin_of_text|>");
  EXPECT_EQ(cfg.eos_token.value_or(""), "<|end_of_text|>");
  EXPECT_TRUE(cfg.chat_template.has_value());
  EXPECT_TRUE(read_tokenizer_config(source_path(kDir + "gpt2/tokenizer.json")).path.empty());
  const std::string dir = testing::temp_dir();
  write_bytes(dir + "/tokenizer_config.json", R"({"eos_token": {"content": "</s>", "lstrip": false}, "bos_token": null})");
  const TokenizerConfig obj = read_tokenizer_config(dir + "/tokenizer.json");
  EXPECT_EQ(obj.eos_token.value_or(""), "</s>");
  EXPECT_FALSE(obj.bos_token.has_value());
  write_bytes(dir + "/tokenizer_config.json", R"({"eos_token": 3})");
  EXPECT_INPUT_ERROR(read_tokenizer_config(dir + "/tokenizer.json"), "field 'eos_token' must be a string");
}

}  // namespace
}  // namespace seqpar
