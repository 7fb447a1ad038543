// The normalizer and decoder steps of a HF tokenizer.json that seqpar applies, as HF `tokenizers`
// applies them (tokenizer_bpe.cpp runs them; io/tokenizer.h lists what a tokenizer.json may hold).
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>
#include <vector>

#include "io/tokenizer.h"

namespace seqpar::tokenizer_detail {

// Text and, for each of its bytes, the byte of the original text it came from (origin has one
// more entry: the original's size). Origins never decrease.
struct AlignedText {
  std::string text;
  std::vector<size_t> origin;
};

// tokenizer.json's "normalizer": NFC, NFD, NFKC, NFKD, Prepend, Replace (a String pattern) and
// Sequence of those; any other type (or option) is an InputError naming it. HF runs it on each
// piece of text between the non-normalized added tokens, and matches the normalized added tokens
// (by their normalized content) in its output.
class Normalizer {
 public:
  // `where` names the file in messages.
  Normalizer(const nlohmann::json& spec, const std::string& where);

  AlignedText apply(std::string_view text) const;
  // Whether ASCII text comes out as it went in (every step a Unicode normalization form).
  bool keeps_ascii() const;
  // One line: "NFC", "Sequence[Prepend('▁'), Replace(' ' -> '▁')]"...
  std::string describe() const;

 private:
  struct Step {
    enum class Kind { kUnicode, kPrepend, kReplace } kind;
    NormalForm form = NormalForm::kNFC;
    std::string a, b;  // Prepend: a; Replace: a -> b
  };
  void add(const nlohmann::json& spec, const std::string& where, const std::string& at);
  std::vector<Step> steps_;
};

// tokenizer.json's "decoder" when it is not ByteLevel: Replace (a String pattern), ByteFallback,
// Fuse, Strip, Metaspace and Sequence of those, each turning the list of token strings into
// another as HF's decode_chain does; the result is their concatenation. One exception to HF:
// ByteFallback keeps the bytes of an invalid UTF-8 sequence as they are (HF writes U+FFFD for
// each), as Tokenizer::decode promises raw bytes.
class DecoderChain {
 public:
  DecoderChain(const nlohmann::json& spec, const std::string& where);
  std::string decode(std::vector<std::string> tokens) const;

 private:
  struct Step {
    enum class Kind { kReplace, kByteFallback, kFuse, kStrip, kMetaspace } kind;
    std::string a, b;  // Replace: a -> b; Strip: a is the content; Metaspace: a is the replacement
    size_t start = 0, stop = 0;
    bool prepend = true;  // Metaspace: prepend_scheme is not "never"
  };
  void add(const nlohmann::json& spec, const std::string& where, const std::string& at);
  std::vector<Step> steps_;
};

// Replaces every leftmost non-overlapping occurrence of `from` (non-empty) in t by `to`, the new
// bytes taking the origin of the bytes they replace.
void replace_aligned(AlignedText& t, std::string_view from, std::string_view to);
// Prepends `s` to non-empty t, the new bytes taking the origin of t's first byte.
void prepend_aligned(AlignedText& t, std::string_view s);
// The text itself, each byte its own origin.
AlignedText identity_aligned(std::string_view text);

}  // namespace seqpar::tokenizer_detail
