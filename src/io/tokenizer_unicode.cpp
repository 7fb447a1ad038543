// The Unicode properties the tokenizers need, from utf8proc (Debian libutf8proc-dev): the code
// point classes of the pre-tokenizer regexes and the four normalization forms, with the alignment
// of every normalized byte to the input byte it came from.
#include <utf8proc.h>

#include <algorithm>

#include "core/error.h"
#include "io/tokenizer.h"

namespace seqpar::tokenizer_detail {

const char* unicode_version() { return utf8proc_unicode_version(); }

CharClass char_class(char32_t c) {
  if (c > 0x10FFFF) return CharClass::kOther;
  if (const auto k = hf_regex_class(c)) return *k;  // HF's regexes know a newer Unicode than utf8proc
  // Oniguruma's \s (Rust regex's too) is the White_Space property: the separators (Zs, Zl, Zp)
  // and the controls TAB..CR and NEL. Python's str.isspace() also takes U+001C..U+001F; \s does not.
  if ((c >= 0x09 && c <= 0x0D) || c == 0x85) return CharClass::kSpace;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
      return CharClass::kLetter;
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_NO:
      return CharClass::kNumber;
    case UTF8PROC_CATEGORY_ZS:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
      return CharClass::kSpace;
    default:
      return CharClass::kOther;
  }
}

bool word_char(char32_t c) {
  // Rust regex's Unicode \w: Alphabetic, marks, decimal digits, connector punctuation and the
  // joiners. Alphabetic is the letters, Nl and Other_Alphabetic; Other_Alphabetic is marks but for
  // the circled and squared Latin letters (So), listed here since utf8proc has no Alphabetic.
  if (c > 0x10FFFF) return false;
  if (c == 0x200C || c == 0x200D) return true;
  if ((c >= 0x24B6 && c <= 0x24E9) || (c >= 0x1F130 && c <= 0x1F149) || (c >= 0x1F150 && c <= 0x1F169) ||
      (c >= 0x1F170 && c <= 0x1F189))
    return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

const char* normal_form_name(NormalForm f) {
  switch (f) {
    case NormalForm::kNFC:
      return "NFC";
    case NormalForm::kNFD:
      return "NFD";
    case NormalForm::kNFKC:
      return "NFKC";
    case NormalForm::kNFKD:
      return "NFKD";
  }
  return "?";
}

void append_utf8(std::string& out, char32_t c) {
  utf8proc_uint8_t buf[4];
  const auto n = utf8proc_encode_char(static_cast<utf8proc_int32_t>(c), buf);
  out.append(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
}

namespace {

// The combining class as HF's normalizers have it: utf8proc's, but 0 for the marks newer than
// HF's tables (tokenizer_hf_unicode.cpp).
int combining_class(utf8proc_int32_t c) {
  const int ccc = utf8proc_get_property(c)->combining_class;
  return ccc != 0 && hf_normalizer_plain(static_cast<char32_t>(c)) ? 0 : ccc;
}

// One code point of the normalization buffer and the input byte it came from.
struct Tagged {
  utf8proc_int32_t c;
  size_t from;
};

// Normalizes chunk[0, n) in place (the Unicode algorithm: full decomposition, canonical
// ordering, then for the composed forms canonical composition), each code point keeping the
// input offset of the character it came from; a composite keeps its starter's.
void normalize_chunk(std::vector<Tagged>& chunk, NormalForm form, std::vector<Tagged>& scratch) {
  const bool compat = form == NormalForm::kNFKC || form == NormalForm::kNFKD;
  const bool compose = form == NormalForm::kNFC || form == NormalForm::kNFKC;
  const auto options = static_cast<utf8proc_option_t>(UTF8PROC_DECOMPOSE | (compat ? UTF8PROC_COMPAT : 0));
  scratch.clear();
  utf8proc_int32_t buf[32];  // the longest full decomposition is 18 code points (U+FDFA)
  for (const Tagged& t : chunk) {
    if (hf_normalizer_plain(static_cast<char32_t>(t.c))) {  // no decomposition for HF
      scratch.push_back(t);
      continue;
    }
    const auto n = utf8proc_decompose_char(t.c, buf, 32, options, nullptr);
    SEQPAR_CHECK(n > 0 && n <= 32, "utf8proc_decompose_char(U+{:04X}) returned {}", t.c, n);
    for (utf8proc_ssize_t k = 0; k < n; ++k) scratch.push_back({buf[k], t.from});
  }
  // Canonical ordering: a stable sort of every run of non-starters by combining class.
  for (size_t i = 0; i < scratch.size();) {
    if (combining_class(scratch[i].c) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < scratch.size() && combining_class(scratch[j].c) != 0) ++j;
    std::stable_sort(scratch.begin() + static_cast<long>(i), scratch.begin() + static_cast<long>(j),
                     [](const Tagged& a, const Tagged& b) { return combining_class(a.c) < combining_class(b.c); });
    i = j;
  }
  chunk.clear();
  if (!compose) {
    chunk.swap(scratch);
    return;
  }
  // Canonical composition, as utf8proc composes: a character joins the last starter when no
  // character between them has a combining class >= its own (a starter joins only an adjacent
  // one). Whether a pair composes (and to what) is utf8proc's, asked one pair at a time;
  // UTF8PROC_STABLE keeps the composition exclusions out.
  long starter = -1;
  int max_ccc = -1;
  for (const Tagged& t : scratch) {
    const int ccc = combining_class(t.c);
    if (starter >= 0 && ccc > max_ccc) {
      utf8proc_int32_t pair[2] = {chunk[static_cast<size_t>(starter)].c, t.c};
      if (utf8proc_normalize_utf32(pair, 2, static_cast<utf8proc_option_t>(UTF8PROC_COMPOSE | UTF8PROC_STABLE)) == 1 &&
          !hf_normalizer_plain(static_cast<char32_t>(pair[0]))) {  // a composite newer than HF's tables is not one
        chunk[static_cast<size_t>(starter)].c = pair[0];
        continue;
      }
    }
    chunk.push_back(t);
    if (ccc != 0) {
      max_ccc = std::max(max_ccc, ccc);
    } else {
      starter = static_cast<long>(chunk.size()) - 1;
      max_ccc = -1;
    }
  }
}

}  // namespace

void normalize_utf8(std::string_view in, NormalForm form, std::string& out, std::vector<size_t>& origin) {
  out.clear();
  origin.clear();
  out.reserve(in.size());
  origin.reserve(in.size() + 1);
  std::vector<Tagged> chunk, scratch;
  size_t watermark = 0;  // origins never decrease (canonical ordering may move a later mark first)
  auto flush = [&] {
    if (chunk.empty()) return;
    normalize_chunk(chunk, form, scratch);
    for (const Tagged& t : chunk) {
      const size_t before = out.size();
      append_utf8(out, static_cast<char32_t>(t.c));
      watermark = std::max(watermark, t.from);
      origin.insert(origin.end(), out.size() - before, watermark);
    }
    chunk.clear();
  };
  const auto* s = reinterpret_cast<const utf8proc_uint8_t*>(in.data());
  for (size_t i = 0; i < in.size();) {
    if (s[i] < 0x80) {
      // ASCII is unchanged by every form, has combining class 0 and composes with nothing before
      // it, so the text before it normalizes on its own. It starts a chunk only when a non-ASCII
      // character follows (which may combine with it: "e" U+0301).
      flush();
      if (i + 1 < in.size() && s[i + 1] >= 0x80) {
        chunk.push_back({s[i], i});
      } else {
        out.push_back(static_cast<char>(s[i]));
        watermark = std::max(watermark, i);
        origin.push_back(watermark);
      }
      ++i;
      continue;
    }
    utf8proc_int32_t c;
    const auto len = utf8proc_iterate(s + i, static_cast<utf8proc_ssize_t>(in.size() - i), &c);
    SEQPAR_INPUT_CHECK(len > 0, "invalid UTF-8 at byte {} of the text", i);
    chunk.push_back({c, i});
    i += static_cast<size_t>(len);
  }
  flush();
  origin.push_back(in.size());
}

}  // namespace seqpar::tokenizer_detail
