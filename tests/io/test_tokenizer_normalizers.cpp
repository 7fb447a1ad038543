// Tokenizers with normalizers against HF `tokenizers` (fixtures by tools/make_normalizer_fixtures.py):
// Qwen2's NFC byte-level BPE and an NFKC variant, a Llama-2 style BPE with byte fallback
// (Prepend/Replace normalizers, no pre-tokenizer) and its Metaspace spelling; HF's NFC / NFD / NFKC /
// NFKD of the same corpus; the alignment of normalized text back to the input.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include <map>

#include "io/tokenizer.h"
#include "io/tokenizer_steps.h"
#include "io_test_util.h"
#include "test_util.h"

namespace seqpar {
namespace {

using nlohmann::json;
using testing::read_bytes;
using testing::source_path;
namespace td = tokenizer_detail;

const std::string kDir = "tests/fixtures/tokenizer/";

// Rust's String::from_utf8_lossy, which HF's ByteLevel decoder ends with: each maximal invalid
// subsequence becomes U+FFFD (seqpar's decode returns the raw bytes instead).
std::string utf8_lossy(const std::string& s) {
  std::string out;
  const auto* b = reinterpret_cast<const unsigned char*>(s.data());
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = b[i];
    size_t len = c < 0x80                   ? 1
                 : (c >= 0xC2 && c <= 0xDF) ? 2
                 : (c >= 0xE0 && c <= 0xEF) ? 3
                 : (c >= 0xF0 && c <= 0xF4) ? 4
                                            : 0;
    size_t k = 1;
    if (len > 1) {
      // The second byte's range depends on the lead (no overlongs, surrogates or > U+10FFFF).
      const unsigned char lo = c == 0xE0   ? 0xA0
                               : c == 0xF0 ? 0x90
                                           : 0x80,
                          hi = c == 0xED   ? 0x9F
                               : c == 0xF4 ? 0x8F
                                           : 0xBF;
      if (i + 1 < s.size() && b[i + 1] >= lo && b[i + 1] <= hi) {
        k = 2;
        while (k < len && i + k < s.size() && (b[i + k] & 0xC0) == 0x80) ++k;
      }
    }
    if (len != 0 && k == len) {
      out.append(s, i, len);
    } else {
      out += "\xEF\xBF\xBD";
      if (len == 0) k = 1;
    }
    i += k;
  }
  return out;
}

const json& fixture() {
  static const json j = json::parse(read_bytes(source_path(kDir + "normalizers.json")));
  return j;
}

std::shared_ptr<const Tokenizer> load(const std::string& name) {
  static std::map<std::string, std::shared_ptr<const Tokenizer>> cache;
  auto& t = cache[name];
  if (!t) t = Tokenizer::load(source_path(kDir + name + "/tokenizer.json"));
  return t;
}

TEST(TokenizerNormalizers, IdsEqualHuggingFace) {
  int checked = 0;
  std::map<std::string, int> per_tokenizer;
  for (const json& c : fixture()["cases"]) {
    const auto tok = load(c["tokenizer"]);
    const std::string text = c["text"];
    const auto ids = c["ids"].get<std::vector<int32_t>>(), plain = c["ids_plain"].get<std::vector<int32_t>>();
    EXPECT_EQ(tok->encode(text, true), ids) << c["tokenizer"] << " on " << c["text"].dump();
    std::vector<int64_t> starts;
    EXPECT_EQ(tok->encode(text, false, &starts), plain) << c["tokenizer"] << " on " << c["text"].dump();
    EXPECT_EQ(utf8_lossy(tok->decode(plain)), c["decoded"].get<std::string>())
        << c["tokenizer"] << " on " << c["text"].dump();
    ASSERT_EQ(starts.size(), plain.size());
    for (size_t k = 0; k < starts.size(); ++k) {
      ASSERT_GE(starts[k], k ? starts[k - 1] : 0) << c["text"].dump();
      ASSERT_LE(starts[k], static_cast<int64_t>(text.size())) << c["text"].dump();
    }
    ++checked;
    ++per_tokenizer[c["tokenizer"]];
  }
  EXPECT_EQ(per_tokenizer.size(), 4u);
  EXPECT_GE(checked, 60);
}

TEST(TokenizerNormalizers, FormsEqualHuggingFace) {
  const std::map<std::string, td::NormalForm> forms{{"NFC", td::NormalForm::kNFC},
                                                    {"NFD", td::NormalForm::kNFD},
                                                    {"NFKC", td::NormalForm::kNFKC},
                                                    {"NFKD", td::NormalForm::kNFKD}};
  int changed = 0;
  for (const json& c : fixture()["normalized"]) {
    const std::string text = c["text"];
    for (const auto& [name, form] : forms) {
      std::string out;
      std::vector<size_t> origin;
      td::normalize_utf8(text, form, out, origin);
      EXPECT_EQ(out, c[name].get<std::string>()) << name << " of " << c["text"].dump();
      ASSERT_EQ(origin.size(), out.size() + 1);
      EXPECT_EQ(origin.back(), text.size());
      for (size_t k = 1; k < origin.size(); ++k) ASSERT_GE(origin[k], origin[k - 1]);
      changed += out != text;
    }
  }
  EXPECT_GE(changed, 20);  // the corpus exercises the forms
}

TEST(TokenizerNormalizers, AlignmentPointsAtTheInput) {
  std::string out;
  std::vector<size_t> origin;
  // "e" U+0301 "x": the composite é (2 bytes) comes from byte 0, x from byte 3.
  td::normalize_utf8("e\xCC\x81x", td::NormalForm::kNFC, out, origin);
  EXPECT_EQ(out, "\xC3\xA9x");
  EXPECT_EQ(origin, (std::vector<size_t>{0, 0, 3, 4}));
  // ﬁ (3 bytes) -> "fi" under NFKC: both letters from byte 1.
  td::normalize_utf8("a\xEF\xAC\x81", td::NormalForm::kNFKC, out, origin);
  EXPECT_EQ(out, "afi");
  EXPECT_EQ(origin, (std::vector<size_t>{0, 1, 1, 4}));
  // Hangul: a syllable decomposes into its jamo under NFD, and they compose back under NFC.
  td::normalize_utf8("\xEA\xB0\x81", td::NormalForm::kNFD, out, origin);
  EXPECT_EQ(out, "\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8");
  std::string composed;
  td::normalize_utf8(out, td::NormalForm::kNFC, composed, origin);
  EXPECT_EQ(composed, "\xEA\xB0\x81");
  EXPECT_EQ(origin, (std::vector<size_t>{0, 0, 0, 9}));
  // Prepend + Replace (Llama-2's normalizer): "▁" before and for each space, from the byte it replaces.
  const td::Normalizer n(json::parse(R"({"type":"Sequence","normalizers":[{"type":"Prepend","prepend":"▁"},
                                        {"type":"Replace","pattern":{"String":" "},"content":"▁"}]})"),
                         "test");
  const td::AlignedText t = n.apply("a b");
  EXPECT_EQ(t.text,
            "\xE2\x96\x81"
            "a\xE2\x96\x81"
            "b");
  EXPECT_EQ(t.origin, (std::vector<size_t>{0, 0, 0, 0, 1, 1, 1, 2, 3}));
  EXPECT_EQ(n.describe(), "Sequence[Prepend('▁'), Replace(' ' -> '▁')]");
}

// What prepare-data's SFT masks rely on: a token starts at the input byte its text came from,
// also after a normalizer changed the text before it.
TEST(TokenizerNormalizers, StartsAreInputOffsets) {
  const auto tok = load("qwen2_nfc");
  const std::string text = "<|im_start|>user\nCafe\xCC\x81?<|im_end|>\nok";
  std::vector<int64_t> starts;
  const auto ids = tok->encode(text, false, &starts);
  const auto end_id = *tok->token_to_id("<|im_end|>");
  const auto at = std::find(ids.begin(), ids.end(), end_id) - ids.begin();
  ASSERT_LT(at, static_cast<long>(ids.size()));
  EXPECT_EQ(starts[static_cast<size_t>(at)], static_cast<int64_t>(text.find("<|im_end|>")));
  // The word after the changed text starts where it does in the input.
  EXPECT_NE(std::find(starts.begin(), starts.end(), static_cast<int64_t>(text.find("ok"))), starts.end());
  EXPECT_NE(std::find(starts.begin(), starts.end(), static_cast<int64_t>(text.find("?"))), starts.end());
  // The composed and decomposed spellings give the same ids (NFC); the added token "café" is
  // normalized, so it matches both.
  EXPECT_EQ(tok->encode("cafe\xCC\x81"), tok->encode("caf\xC3\xA9"));
  EXPECT_EQ(tok->encode("cafe\xCC\x81"), std::vector<int32_t>{*tok->token_to_id("caf\xC3\xA9")});
  EXPECT_NE(tok->summary().find("normalizer NFC"), std::string::npos) << tok->summary();
  // NFKC: the fullwidth added token "<ｔｏｏｌ>" is matched by its normalized content "<tool>".
  const auto nfkc = load("qwen2_nfkc");
  const auto tool = nfkc->token_to_id("<\xEF\xBD\x94\xEF\xBD\x8F\xEF\xBD\x8F\xEF\xBD\x8C>");
  ASSERT_TRUE(tool.has_value());
  EXPECT_EQ(nfkc->encode("<tool>"), std::vector<int32_t>{*tool});
}

TEST(TokenizerNormalizers, SentencePieceStyle) {
  const auto tok = load("llama2");
  EXPECT_EQ(tok->encode("Hello").front(), 1);  // BOS from the template
  // A character missing from the vocabulary falls back to its bytes' <0xXX> tokens, all starting
  // at the character.
  std::vector<int64_t> starts;
  const auto ids = tok->encode("H", false, &starts);
  ASSERT_EQ(ids.size(), 2u);  // "▁" (from Prepend) and <0x48>
  EXPECT_EQ(ids[1], *tok->token_to_id("<0x48>"));
  EXPECT_EQ(starts, (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(tok->decode(ids), "H");
  EXPECT_NE(tok->summary().find("byte-fallback BPE"), std::string::npos) << tok->summary();
  EXPECT_NE(load("metaspace")->summary().find("metaspace('▁', prepend first)"), std::string::npos)
      << load("metaspace")->summary();
  // Without byte fallback or unk token a missing character is an error (HF drops it silently).
  json j = json::parse(read_bytes(source_path(kDir + "llama2/tokenizer.json")));
  j["model"]["byte_fallback"] = false;
  j["model"]["unk_token"] = nullptr;
  const std::string path = testing::temp_dir() + "/tokenizer.json";
  testing::write_bytes(path, j.dump());
  const auto strict = Tokenizer::load(path);
  EXPECT_INPUT_ERROR(strict->encode("H"), "character 'H' has no token in the vocabulary and the model has no unk_token");
  j["model"]["byte_fallback"] = true;
  j["model"]["unk_token"] = "<unk>";
  testing::write_bytes(path, j.dump());
  EXPECT_EQ(Tokenizer::load(path)->encode("H", false), (std::vector<int32_t>{*tok->token_to_id("▁"), 3 + 0x48}));
}

// HF's Unicode differs from utf8proc's in two tables (tools/make_hf_unicode_table.py): its
// normalizers know Unicode 9.0 (a newer mark is a plain character to them), its regexes a newer
// Unicode than utf8proc 2.8 (Unicode 15.1 / 16 letters, CJK Extension I).
TEST(TokenizerNormalizers, HuggingFaceUnicodeTables) {
  const json fx = json::parse(read_bytes(source_path(kDir + "hf_unicode.json")));
  // The tables were computed against this utf8proc: another one needs them computed again.
  ASSERT_STREQ(td::unicode_version(), fx["utf8proc_unicode_version"].get<std::string>().c_str())
      << "rerun tools/make_hf_unicode_table.py";
  EXPECT_STREQ(td::hf_unicode_tables_version(), td::unicode_version());
  const std::map<std::string, td::NormalForm> forms{{"NFC", td::NormalForm::kNFC},
                                                    {"NFD", td::NormalForm::kNFD},
                                                    {"NFKC", td::NormalForm::kNFKC},
                                                    {"NFKD", td::NormalForm::kNFKD}};
  ASSERT_GE(fx["normalized"].size(), 200u);
  for (const json& c : fx["normalized"]) {
    const std::string text = c["text"];
    for (const auto& [name, form] : forms) {
      std::string out;
      std::vector<size_t> origin;
      td::normalize_utf8(text, form, out, origin);
      EXPECT_EQ(out, c[name].get<std::string>()) << name << " of " << c["text"].dump();
    }
  }
  ASSERT_GE(fx["classes"].size(), 1000u);
  for (const json& c : fx["classes"]) {
    const auto cp = c[0].get<uint32_t>();
    EXPECT_EQ(static_cast<int>(td::char_class(cp)), c[1].get<int>()) << fmt::format("U+{:04X}", cp);
  }
  EXPECT_EQ(td::char_class(0x2EBF0), td::CharClass::kLetter);  // CJK Extension I (Unicode 15.1)
  // U+0898 (Unicode 14, class 230) is a plain character to HF's NFC: no reordering before U+0316.
  std::string out;
  std::vector<size_t> origin;
  td::normalize_utf8("a\xE0\xA2\x98\xCC\x96", td::NormalForm::kNFC, out, origin);
  EXPECT_EQ(out, "a\xE0\xA2\x98\xCC\x96");
}

}  // namespace
}  // namespace seqpar
