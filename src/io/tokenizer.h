// Tokenizers: text <-> token ids, with no Python at run time.
//
// Supported (docs/prepare-data.md has the full list):
//   - GPT-2's vocab.json + merges.txt (Tokenizer::load_gpt2_files), the same BPE.
//   - Hugging Face `tokenizer.json` with a BPE model, run as HF `tokenizers` runs it:
//     normalizer none, NFC, NFD, NFKC, NFKD, Prepend, Replace (a String pattern) or a Sequence of
//     those (io/tokenizer_steps.h), applied to the text between non-normalized added tokens;
//     pre-tokenizer ByteLevel (its GPT-2 regex or none), or a Sequence of Split (the GPT-2,
//     Llama-3 or Qwen2 regex, behaviour Isolated) followed by ByteLevel — a byte-level BPE (GPT-2,
//     Llama-3, Qwen2) — or Metaspace, or none — a BPE over characters with byte_fallback
//     (Llama-2, Mistral); BPE merges with ranks (both the "a b" and the ["a", "b"] spelling),
//     ignore_merges, byte_fallback, unk_token, fuse_unk; added and special tokens (lstrip, rstrip,
//     single_word, normalized) matched before pre-tokenisation; the post-processor's template
//     tokens (TemplateProcessing, ByteLevel, Sequence); decoders ByteLevel, or Replace,
//     ByteFallback, Fuse, Strip, Metaspace and Sequence of those.
//   - SentencePiece `tokenizer.model`, when seqpar was built with libsentencepiece
//     (SEQPAR_WITH_SENTENCEPIECE); otherwise loading one is an InputError saying so.
//   - A model directory holding one of those (Tokenizer::load).
// Unicode properties come from utf8proc, with HF's own differences applied on top
// (tokenizer_hf_unicode.cpp), so the ids are HF's.
// Anything else is an InputError naming the file, the component and its type.
//
// Encoding is const and thread-safe: one tokenizer serves many threads.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace seqpar {

class Tokenizer {
 public:
  // Loads `path`: a HF tokenizer.json, a SentencePiece model (a name ending in ".model"), or a
  // model directory holding tokenizer.json, else tokenizer.model, else GPT-2's vocab.json +
  // merges.txt. A tiktoken BPE file (Llama-3's original/tokenizer.model) and a vocab.json without
  // merges.txt are InputErrors saying what they are and what to pass instead.
  static std::shared_ptr<const Tokenizer> load(const std::string& path);
  // The file load() reads for `path` (a directory's vocab.json + merges.txt: the directory).
  static std::string resolve(const std::string& path);
  // GPT-2's byte-level BPE from its original files, as Megatron's GPT2BPETokenizer and HF's
  // GPT2Tokenizer(vocab_file, merges_file) read them: vocab.json ({token: id}) and merges.txt (one
  // "a b" merge per line, ranked by line, after an optional "#version" line); ByteLevel pre-
  // tokenizer with the GPT-2 regex and no prefix space, ByteLevel decoder, no template tokens;
  // <|endoftext|> (when the vocabulary has it) a special token. The same BPE as tokenizer.json.
  static std::shared_ptr<const Tokenizer> load_gpt2_files(const std::string& vocab_json, const std::string& merges_txt);
  virtual ~Tokenizer() = default;

  // text (UTF-8; an InputError names the byte offset of invalid UTF-8) -> ids, as HF
  // `tokenizer.encode(text, add_special_tokens=...)`. With `starts`, also the byte offset in
  // `text` where each token begins (the template's prefix tokens get 0, its suffix tokens
  // text.size()); tokens never straddle an added token, and their starts do not decrease.
  virtual std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true,
                                      std::vector<int64_t>* starts = nullptr) const = 0;
  // ids -> bytes, as HF `tokenizer.decode(ids)` but without UTF-8 repair: a sequence that cuts a
  // character returns its raw bytes. InputError for an id outside [0, vocab_size()).
  virtual std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const = 0;

  // One more than the largest id (model vocabulary and added tokens).
  virtual int64_t vocab_size() const = 0;
  // The id of a vocabulary or added token given by its exact text (for a byte-level BPE, the
  // token's spelling in the tokenizer.json, e.g. "<|eot_id|>").
  virtual std::optional<int32_t> token_to_id(std::string_view token) const = 0;
  // The end-of-sequence token the tokenizer file itself defines (a SentencePiece model's eos piece,
  // `</s>` for Llama-2 / Mistral), where it has one; tokenizer.json leaves that to tokenizer_config.json.
  virtual std::optional<std::string> own_eos_token() const { return std::nullopt; }
  // One line: kind, vocabulary size, pre-tokenizer, template tokens.
  virtual std::string summary() const = 0;

  const std::string& path() const { return path_; }

 protected:
  explicit Tokenizer(std::string path) : path_(std::move(path)) {}

 private:
  std::string path_;
};

// What seqpar reads of the tokenizer_config.json next to a tokenizer file, or in a tokenizer
// directory (all optional; the file may be absent, then `path` is empty). bos/eos_token accept both the string and the
// {"content": ...} spelling.
struct TokenizerConfig {
  std::string path;
  std::optional<std::string> bos_token;
  std::optional<std::string> eos_token;
  std::optional<std::string> chat_template;  // the Jinja source, when it is a string (or the list's "default")
  // chat_template as a list of named templates ({"name", "template"}), in file order; empty for a string.
  std::vector<std::pair<std::string, std::string>> named_chat_templates;
  // The special-token variables transformers passes to a chat template (its special_tokens_map): bos_token,
  // eos_token, unk_token, sep_token, pad_token, cls_token, mask_token, those that are set, as their text.
  std::vector<std::pair<std::string, std::string>> special_tokens;
};
TokenizerConfig read_tokenizer_config(const std::string& tokenizer_path);

// The parts of the tokenizer an exact test wants to reach directly.
namespace tokenizer_detail {

// The code point classes of the pre-tokenizer regexes, from utf8proc's general categories
// (unicode_version() is the Unicode version of the utf8proc seqpar runs with).
enum class CharClass : unsigned char { kOther = 0, kLetter = 1, kNumber = 2, kSpace = 3 };
CharClass char_class(char32_t c);
const char* unicode_version();
// Rust regex's Unicode \w (what an added token's single_word looks at on either side).
bool word_char(char32_t c);

// The Unicode normalization forms (UAX #15), computed with utf8proc's tables.
enum class NormalForm { kNFC, kNFD, kNFKC, kNFKD };
const char* normal_form_name(NormalForm f);
// `in` (valid UTF-8) in the form `f`. origin[k] is the byte of `in` where the character that
// normalized byte k came from starts (a composite: its first character's), never decreasing;
// origin has one more entry, in.size().
void normalize_utf8(std::string_view in, NormalForm f, std::string& out, std::vector<size_t>& origin);
void append_utf8(std::string& out, char32_t c);

// Where HF `tokenizers`' Unicode data differ from utf8proc's (generated by
// tools/make_hf_unicode_table.py, which says why): the code points HF's normalizers treat as
// plain (no combining class, no decomposition; their tables are Unicode 9.0), and HF's regex
// class where it is not utf8proc's (Oniguruma's newer Unicode). hf_unicode_tables_version() is
// the utf8proc Unicode version they were computed against.
bool hf_normalizer_plain(char32_t c);
std::optional<CharClass> hf_regex_class(char32_t c);
const char* hf_unicode_tables_version();

// Decodes UTF-8 into code points and the byte offset of each (offsets has one more entry: the
// end). InputError "invalid UTF-8 at byte N" for malformed input (overlong, surrogate, > U+10FFFF).
void decode_utf8(std::string_view text, std::vector<char32_t>& cps, std::vector<size_t>& offsets);
// The same checks and messages, without storing anything.
void validate_utf8(std::string_view text);

// The pre-tokenizer regexes seqpar implements as state machines:
//   kGpt2:   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//   kLlama3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
//            \s*[\r\n]+|\s+(?!\S)|\s+
//   kQwen2:  kLlama3 with \p{N} instead of \p{N}{1,3}
enum class SplitPattern { kGpt2, kLlama3, kQwen2 };
std::optional<SplitPattern> split_pattern_from_regex(std::string_view regex);
const char* split_pattern_name(SplitPattern p);

// HF Split(pattern, behavior=Isolated) on code points [0, n): the pieces as [begin, end) code
// point ranges, covering [0, n) in order.
std::vector<std::pair<size_t, size_t>> split_pretokens(const std::vector<char32_t>& cps, SplitPattern pattern);

// The GPT-2 byte <-> unicode map of the ByteLevel pre-tokenizer: byte b is written as code point
// byte_to_unicode(b) (printable bytes as themselves, the others as U+0100 + n).
char32_t byte_to_unicode(uint8_t b);

// The loaders behind Tokenizer::load (tokenizer_bpe.cpp, tokenizer_sentencepiece.cpp).
std::shared_ptr<const Tokenizer> load_hf_tokenizer(const std::string& path);
std::shared_ptr<const Tokenizer> load_gpt2_files(const std::string& vocab_json, const std::string& merges_txt);
std::shared_ptr<const Tokenizer> load_sentencepiece_tokenizer(const std::string& path);
bool sentencepiece_available();  // built with libsentencepiece

}  // namespace tokenizer_detail

}  // namespace seqpar
