// The pieces every tokenizer shares: UTF-8, the pre-tokenizer regexes as state machines, the
// byte-level alphabet, tokenizer_config.json, and the loader that picks the kind of tokenizer.
#include "io/tokenizer.h"

#include <nlohmann/json.hpp>

#include <cctype>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "io/input_file.h"
#include "io/json_describe.h"

namespace seqpar {

namespace tokenizer_detail {

namespace {

// Decodes the character at byte i of s[0, n) into c; returns its length in bytes.
size_t decode_one(const unsigned char* s, size_t n, size_t i, char32_t& c) {
  const unsigned char b = s[i];
  size_t len;
  if (b < 0x80) {
    c = b;
    return 1;
  } else if (b >= 0xC2 && b <= 0xDF) {
    c = b & 0x1F;
    len = 2;
  } else if (b >= 0xE0 && b <= 0xEF) {
    c = b & 0x0F;
    len = 3;
  } else if (b >= 0xF0 && b <= 0xF4) {
    c = b & 0x07;
    len = 4;
  } else {
    throw InputError(fmt::format("invalid UTF-8 at byte {} of the text: byte 0x{:02X} cannot start a character", i, b));
  }
  SEQPAR_INPUT_CHECK(i + len <= n, "invalid UTF-8 at byte {} of the text: a {}-byte character is cut by the end of the text",
                     i, len);
  for (size_t k = 1; k < len; ++k) {
    SEQPAR_INPUT_CHECK((s[i + k] & 0xC0) == 0x80,
                       "invalid UTF-8 at byte {} of the text: byte 0x{:02X} is not a continuation byte", i + k, s[i + k]);
    c = (c << 6) | (s[i + k] & 0x3F);
  }
  // Overlong forms, surrogates and code points past U+10FFFF are malformed (RFC 3629).
  const bool overlong = (len == 3 && c < 0x800) || (len == 4 && c < 0x10000);
  SEQPAR_INPUT_CHECK(!overlong && !(c >= 0xD800 && c <= 0xDFFF) && c <= 0x10FFFF,
                     "invalid UTF-8 at byte {} of the text: U+{:04X} in {} bytes is not a valid character", i,
                     static_cast<uint32_t>(c), len);
  return len;
}

}  // namespace

void decode_utf8(std::string_view text, std::vector<char32_t>& cps, std::vector<size_t>& offsets) {
  cps.clear();
  offsets.clear();
  cps.reserve(text.size());
  offsets.reserve(text.size() + 1);
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  for (size_t i = 0; i < text.size();) {
    char32_t c;
    const size_t len = decode_one(s, text.size(), i, c);
    cps.push_back(c);
    offsets.push_back(i);
    i += len;
  }
  offsets.push_back(text.size());
}

void validate_utf8(std::string_view text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  char32_t c;
  for (size_t i = 0; i < text.size();) i += s[i] < 0x80 ? 1 : decode_one(s, text.size(), i, c);
}

std::optional<SplitPattern> split_pattern_from_regex(std::string_view regex) {
  static const std::string kGpt2 = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
  static const std::string kLlama3 =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  static const std::string kQwen2 =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  if (regex == kGpt2) return SplitPattern::kGpt2;
  if (regex == kLlama3) return SplitPattern::kLlama3;
  if (regex == kQwen2) return SplitPattern::kQwen2;
  return std::nullopt;
}

const char* split_pattern_name(SplitPattern p) {
  switch (p) {
    case SplitPattern::kGpt2: return "gpt2";
    case SplitPattern::kLlama3: return "llama3";
    case SplitPattern::kQwen2: return "qwen2";
  }
  return "?";
}

namespace {

// One matcher per regex: match(i) returns the end of the leftmost-first match starting at code
// point i (> i), or i when no alternative matches there. The alternatives are tried in the
// regex's order, each with the greedy/backtracking result Oniguruma gives it, as commented.
class Matcher {
 public:
  Matcher(const std::vector<char32_t>& cps, SplitPattern pattern) : c_(cps), n_(cps.size()), pattern_(pattern) {
    cls_.resize(n_);
    for (size_t i = 0; i < n_; ++i) cls_[i] = char_class(c_[i]);
  }

  size_t match(size_t i) const { return pattern_ == SplitPattern::kGpt2 ? match_gpt2(i) : match_llama3(i); }

 private:
  bool letter(size_t i) const { return i < n_ && cls_[i] == CharClass::kLetter; }
  bool number(size_t i) const { return i < n_ && cls_[i] == CharClass::kNumber; }
  bool space(size_t i) const { return i < n_ && cls_[i] == CharClass::kSpace; }
  bool other(size_t i) const { return i < n_ && cls_[i] == CharClass::kOther; }  // [^\s\p{L}\p{N}]
  bool crlf(size_t i) const { return i < n_ && (c_[i] == U'\r' || c_[i] == U'\n'); }
  size_t run_end(size_t i, bool (Matcher::*in)(size_t) const) const {
    while ((this->*in)(i)) ++i;
    return i;
  }

  // 's|'t|'re|'ve|'m|'ll|'d, case-sensitive (GPT-2) or under (?i) (Llama-3), where Unicode case
  // folding also matches 's' with U+017F LATIN SMALL LETTER LONG S. Returns the end or i.
  size_t contraction(size_t i, bool fold) const {
    if (c_[i] != U'\'' || i + 1 >= n_) return i;
    auto lower = [&](size_t k) -> char32_t {
      char32_t ch = c_[k];
      if (!fold) return ch;
      if (ch >= U'A' && ch <= U'Z') return ch - U'A' + U'a';
      if (ch == U'\u017F') return U's';
      return ch;
    };
    const char32_t a = lower(i + 1);
    if (a == U's' || a == U't' || a == U'm' || a == U'd') return i + 2;
    if (i + 2 < n_) {
      const char32_t b = lower(i + 2);
      if ((a == U'r' && b == U'e') || (a == U'v' && b == U'e') || (a == U'l' && b == U'l')) return i + 3;
    }
    return i;
  }

  // \s+(?!\S) then \s+, for a whitespace run starting at i: the whole run at the end of the text
  // or when it is one character; otherwise the run but its last character (which is left to
  // join the next word as its optional leading character).
  size_t trailing_space(size_t i) const {
    const size_t j = run_end(i, &Matcher::space);
    if (j == n_ || j - i == 1) return j;
    return j - 1;
  }

  size_t match_llama3(size_t i) const {
    // (?i:'s|'t|'re|'ve|'m|'ll|'d)
    if (size_t e = contraction(i, /*fold=*/true); e > i) return e;
    // [^\r\n\p{L}\p{N}]?\p{L}+ : the optional character is anything but CR, LF, a letter or a number.
    if (!crlf(i) && !letter(i) && !number(i) && letter(i + 1)) return run_end(i + 1, &Matcher::letter);
    if (letter(i)) return run_end(i, &Matcher::letter);
    // \p{N}{1,3} (Qwen2: \p{N})
    if (number(i)) {
      const size_t max_digits = pattern_ == SplitPattern::kQwen2 ? 1 : 3;
      size_t j = i + 1;
      while (j - i < max_digits && number(j)) ++j;
      return j;
    }
    //  ?[^\s\p{L}\p{N}]+[\r\n]*
    {
      size_t k = (c_[i] == U' ' && other(i + 1)) ? i + 1 : i;
      if (other(k)) return run_end(run_end(k, &Matcher::other), &Matcher::crlf);
    }
    if (space(i)) {
      // \s*[\r\n]+ : \s* backtracks to the last CR/LF of the whitespace run.
      const size_t j = run_end(i, &Matcher::space);
      for (size_t m = j; m > i; --m)
        if (crlf(m - 1)) return m;
      // \s+(?!\S) | \s+
      return trailing_space(i);
    }
    return i;
  }

  size_t match_gpt2(size_t i) const {
    if (size_t e = contraction(i, /*fold=*/false); e > i) return e;
    // " ?\p{L}+", " ?\p{N}+", " ?[^\s\p{L}\p{N}]+": an optional U+0020 then a run of one class.
    using Pred = bool (Matcher::*)(size_t) const;
    for (Pred in : {Pred(&Matcher::letter), Pred(&Matcher::number), Pred(&Matcher::other)}) {
      if (c_[i] == U' ' && (this->*in)(i + 1)) return run_end(i + 1, in);
      if ((this->*in)(i)) return run_end(i, in);
    }
    if (space(i)) return trailing_space(i);
    return i;
  }

  const std::vector<char32_t>& c_;
  size_t n_;
  SplitPattern pattern_;
  std::vector<CharClass> cls_;
};

}  // namespace

std::vector<std::pair<size_t, size_t>> split_pretokens(const std::vector<char32_t>& cps, SplitPattern pattern) {
  std::vector<std::pair<size_t, size_t>> pieces;
  const Matcher m(cps, pattern);
  size_t gap = 0;  // start of the unmatched run before i (Isolated keeps it as a piece of its own)
  size_t i = 0;
  while (i < cps.size()) {
    const size_t e = m.match(i);
    if (e == i) {  // no alternative matches here (cannot happen with these patterns; kept for safety)
      ++i;
      continue;
    }
    if (gap < i) pieces.emplace_back(gap, i);
    pieces.emplace_back(i, e);
    i = gap = e;
  }
  if (gap < cps.size()) pieces.emplace_back(gap, cps.size());
  return pieces;
}

char32_t byte_to_unicode(uint8_t b) {
  // Printable Latin-1 bytes stand for themselves; the 68 others (controls, space, DEL, NBSP,
  // soft hyphen) take U+0100, U+0101, ... in byte order.
  auto printable = [](int x) { return (x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255); };
  if (printable(b)) return b;
  int n = 0;
  for (int x = 0; x < b; ++x)
    if (!printable(x)) ++n;
  return static_cast<char32_t>(256 + n);
}

}  // namespace tokenizer_detail

namespace {

std::optional<std::string> token_text(const nlohmann::json& v, const std::string& src, const char* field) {
  if (v.is_null()) return std::nullopt;
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  throw InputError(fmt::format("{}: field '{}' must be a string or an object with a string 'content', got {}", src,
                               field, short_json(v)));
}

}  // namespace

TokenizerConfig read_tokenizer_config(const std::string& tokenizer_path) {
  TokenizerConfig cfg;
  const std::filesystem::path given(tokenizer_path);
  const auto path = (std::filesystem::is_directory(given) ? given : given.parent_path()) / "tokenizer_config.json";
  if (!std::filesystem::exists(path)) return cfg;
  cfg.path = path.string();
  const nlohmann::json j = parse_json_input(read_input_file(cfg.path, kConfigInput), cfg.path);
  SEQPAR_INPUT_CHECK(j.is_object(), "{}: must be a JSON object", cfg.path);
  if (j.contains("bos_token")) cfg.bos_token = token_text(j["bos_token"], cfg.path, "bos_token");
  if (j.contains("eos_token")) cfg.eos_token = token_text(j["eos_token"], cfg.path, "eos_token");
  if (j.contains("chat_template") && j["chat_template"].is_string())
    cfg.chat_template = j["chat_template"].get<std::string>();
  // A list of named templates ({"name", "template"}) counts as a template too: its default.
  if (j.contains("chat_template") && j["chat_template"].is_array())
    for (const auto& t : j["chat_template"]) {
      SEQPAR_INPUT_CHECK(t.is_object() && t.contains("name") && t["name"].is_string() && t.contains("template") &&
                             t["template"].is_string(),
                         "{}: chat_template: each entry of the list must be an object with string 'name' and "
                         "'template', got {}",
                         cfg.path, short_json(t));
      cfg.named_chat_templates.emplace_back(t["name"].get<std::string>(), t["template"].get<std::string>());
      if (t["name"] == "default") cfg.chat_template = t["template"].get<std::string>();
    }
  for (const char* field :
       {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"})
    if (j.contains(field))
      if (auto text = token_text(j[field], cfg.path, field)) cfg.special_tokens.emplace_back(field, *text);
  return cfg;
}

namespace {

// Llama-3's original/tokenizer.model (tiktoken's BPE file): lines of a base64 token, a space and
// its rank. A SentencePiece model is a binary protobuf, which never starts like that.
bool looks_like_tiktoken(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string line;
  if (!std::getline(in, line) || line.empty()) return false;
  const size_t sp = line.find(' ');
  if (sp == 0 || sp == std::string::npos || sp + 1 == line.size()) return false;
  for (size_t k = 0; k < sp; ++k) {
    const char c = line[k];
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '+' && c != '/' && c != '=') return false;
  }
  for (size_t k = sp + 1; k < line.size(); ++k)
    if (!std::isdigit(static_cast<unsigned char>(line[k]))) return false;
  return true;
}

std::string tiktoken_error(const std::string& path) {
  return fmt::format(
      "--tokenizer '{}' is a tiktoken BPE file (a base64 token and its rank per line, as Llama-3's "
      "original/tokenizer.model), which seqpar does not read: pass the model's Hugging Face "
      "tokenizer.json (or its directory) instead",
      path);
}

}  // namespace

std::string Tokenizer::resolve(const std::string& path) {
  namespace fs = std::filesystem;
  SEQPAR_INPUT_CHECK(fs::exists(path), "--tokenizer '{}': no such file or directory", path);
  if (!fs::is_directory(path)) return path;
  // A model directory: what transformers' AutoTokenizer would use, in its order of preference.
  const fs::path dir(path);
  for (const char* name : {"tokenizer.json", "tokenizer.model"})
    if (fs::exists(dir / name)) return (dir / name).string();
  const bool vocab = fs::exists(dir / "vocab.json"), merges = fs::exists(dir / "merges.txt");
  if (vocab && merges) return path;  // GPT-2's files, loaded by load()
  SEQPAR_INPUT_CHECK(!vocab,
                     "--tokenizer '{}': the directory has a vocab.json but no merges.txt, so it is not a GPT-2 BPE "
                     "(a WordPiece or other vocabulary, which seqpar does not read): pass a directory with "
                     "tokenizer.json, or GPT-2's vocab.json with merges.txt (--vocab-file / --merge-file)",
                     path);
  throw InputError(
      fmt::format("--tokenizer '{}': the directory has no tokenizer.json, tokenizer.model, or vocab.json "
                  "with merges.txt",
                  path));
}

std::shared_ptr<const Tokenizer> Tokenizer::load(const std::string& path) {
  namespace fs = std::filesystem;
  const std::string file = resolve(path);
  if (fs::is_directory(file))
    return load_gpt2_files((fs::path(file) / "vocab.json").string(), (fs::path(file) / "merges.txt").string());
  check_input_file(file, kTokenizerInput);
  const fs::path p(file);
  if (p.extension() == ".model") {
    SEQPAR_INPUT_CHECK(!looks_like_tiktoken(file), "{}", tiktoken_error(file));
    return tokenizer_detail::load_sentencepiece_tokenizer(file);
  }
  SEQPAR_INPUT_CHECK(p.filename() != "vocab.json",
                     "--tokenizer '{}' is a vocab.json alone: a GPT-2 BPE needs its merges.txt too (pass the "
                     "directory holding both, or --vocab-file with --merge-file); a vocab.json without merges is not "
                     "a BPE seqpar reads",
                     file);
  SEQPAR_INPUT_CHECK(!looks_like_tiktoken(file), "{}", tiktoken_error(file));
  return tokenizer_detail::load_hf_tokenizer(file);
}

std::shared_ptr<const Tokenizer> Tokenizer::load_gpt2_files(const std::string& vocab_json,
                                                            const std::string& merges_txt) {
  SEQPAR_INPUT_CHECK(std::filesystem::exists(vocab_json), "--vocab-file '{}': no such file", vocab_json);
  SEQPAR_INPUT_CHECK(std::filesystem::exists(merges_txt), "--merge-file '{}': no such file", merges_txt);
  check_input_file(vocab_json, kTokenizerInput);
  check_input_file(merges_txt, kTokenizerInput);
  return tokenizer_detail::load_gpt2_files(vocab_json, merges_txt);
}

}  // namespace seqpar
