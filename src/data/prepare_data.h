// `seqpar prepare-data`: text / JSONL / SFT JSONL -> a token file (data/token_file.h), with
// document boundaries and, for SFT, a loss mask. docs/prepare-data.md describes the formats.
//
// Multi-threaded: the reader cuts the inputs into chunks of whole records (chunk_bytes each, a
// size independent of the thread count), workers tokenize chunks, and the writer takes the
// results in input order: the output bytes do not depend on `threads`. The first bad record in
// input order stops the run with "<file>:<line>: <problem>", and no output file is left.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace seqpar {

class Tokenizer;
struct TokenizerConfig;

enum class DataFormat {
  kText,   // plain text; documents per `text_unit`
  kJsonl,  // one JSON object per line; the document is the string field `text_field`
  kSft,    // one JSON object per line: {prompt, completion} or {messages: [{role, content}]}
};
DataFormat parse_data_format(const std::string& s, const std::string& setting);
// --format auto: jsonl when every input ends in .jsonl or .json, text when none does (an
// InputError for a mix). SFT is never guessed.
DataFormat guess_data_format(const std::vector<std::string>& inputs);

// What a document is in a plain text file.
enum class TextUnit {
  kParagraph,  // a block of non-blank lines, ended by a blank (empty or whitespace-only) line
  kLine,       // a non-blank line
  kFile,       // the whole file
};
TextUnit parse_text_unit(const std::string& s, const std::string& setting);

// The most tokenizer threads --threads may ask for (each holds a chunk of text in flight).
inline constexpr int kMaxPrepareThreads = 256;

struct PrepareDataOptions {
  std::string tokenizer;               // tokenizer.json / tokenizer.model; or, empty:
  std::string vocab_file, merge_file;  // GPT-2's vocab.json + merges.txt (Megatron's --vocab-file / --merge-file)
  std::vector<std::string> inputs;  // files, read in order
  std::string output;               // token file, written atomically
  DataFormat format = DataFormat::kText;
  TextUnit text_unit = TextUnit::kParagraph;
  std::string text_field = "text";
  int threads = 0;                          // 0: all hardware threads (at most 16); at most kMaxPrepareThreads
  bool add_special_tokens = true;           // the tokenizer's template tokens (BOS) on each document
  bool append_eos = false;                  // an EOS token after each document (trained in SFT); Megatron's
                                            // --append-eod: the documents concatenated with it between them
  std::optional<std::string> eos_token;     // default: eos_token of tokenizer_config.json; with vocab_file,
                                            // <|endoftext|> (Megatron's eod) when that file has none
  // How SFT `messages` are rendered (docs/prepare-data.md, "Chat templates"): chat_format, a built-in format;
  // else chat_template_file; else the tokenizer directory's chat_template.jinja, else tokenizer_config.json's
  // chat_template (chat_template_name picks one of a list of named templates; default "default").
  std::optional<std::string> chat_format;         // one of kChatFormats
  std::optional<std::string> chat_template_file;  // a Jinja chat template file
  std::optional<std::string> chat_template_name;  // a named template of the tokenizer's
  std::optional<std::string> chat_template_now;   // what strftime_now() formats: YYYY-MM-DD[THH:MM:SS]; default now
  int64_t chunk_bytes = 1 << 20;            // input bytes per work unit (tests make it small)
  bool progress = true;                     // progress line on stderr
};

struct PrepareDataStats {
  int64_t documents = 0;
  int64_t tokens = 0;
  int64_t trained_tokens = 0;  // loss mask 1 (all tokens without a mask)
  int64_t skipped = 0;         // records with empty text
  int64_t input_bytes = 0;
  double seconds = 0;
};

PrepareDataStats prepare_data(const PrepareDataOptions& options);

// ---- SFT pieces, public for tests ----------------------------------------------------------

struct ChatMessage {
  std::string role, content;
};

// A rendered conversation and the byte spans whose tokens are trained (loss mask 1).
struct RenderedChat {
  std::string text;
  std::vector<std::pair<size_t, size_t>> trained;  // [begin, end) byte spans of `text`
};

// The Llama-3 (Meta-Llama-3-*-Instruct) chat template, without Jinja:
//   bos + for each message: <|start_header_id|>ROLE<|end_header_id|>\n\n TRIM(CONTENT) <|eot_id|>
// where TRIM is Jinja's `trim` (python str.strip()). Trained: the content and <|eot_id|> of every
// assistant message; masked: the BOS, the headers, every other role.
RenderedChat render_chat_llama3(const std::vector<ChatMessage>& messages, const std::string& bos_token);

// Qwen's ChatML: for each message <|im_start|>ROLE\n CONTENT <|im_end|>\n, CONTENT as it is (no trim);
// `default_system` (when not empty) as a first system turn if the first message is not a system
// one, as Qwen2.5-Instruct's template does. Trained: the content and <|im_end|> of every assistant
// turn (the turn's end, which the model must learn to emit); masked: the headers, the newline after
// <|im_end|>, every other role.
RenderedChat render_chat_chatml(const std::vector<ChatMessage>& messages, const std::string& default_system);
// The built-in chat formats (--chat-format), each rendered by PrepareOptions' renderer.
inline constexpr std::array<const char*, 3> kChatFormats = {"llama3", "chatml", "qwen2.5"};
// kChatFormats joined by `sep` ("llama3|chatml|qwen2.5").
std::string chat_format_names(const char* sep);
// Qwen2.5-Instruct's default system message (--chat-format qwen2.5).
inline constexpr const char* kQwen25DefaultSystem =
    "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";

// One SFT / text document: ids and their loss mask (empty for a document without mask).
struct TokenizedDoc {
  std::vector<int32_t> tokens;
  std::vector<uint8_t> mask;
};

// prompt + completion tokenized as one text (template tokens on when add_special_tokens); a
// token is trained iff its first byte lies in the completion (template suffix tokens count as
// completion). eos >= 0 appends it, trained.
TokenizedDoc tokenize_prompt_completion(const Tokenizer& tok, const std::string& prompt,
                                        const std::string& completion, bool add_special_tokens, int32_t eos);

// The rendered chat tokenized without template tokens (the rendering has its own BOS, as HF's
// apply_chat_template); a token is trained iff its first byte lies in a trained span.
TokenizedDoc tokenize_chat(const Tokenizer& tok, const RenderedChat& chat, int32_t eos);

// A chat template's text, the name its messages give it (a path: parse errors say name:line:column)
// and where it came from, for the progress line. Empty name: none.
struct ChatTemplateFile {
  std::string source, name, description;
};
// A chat template file (--chat-template).
std::string read_chat_template(const std::string& path);
// The tokenizer's own template (`tokenizer`: its file or directory; `cfg`: its tokenizer_config.json):
// without `name` (or "default"), chat_template.jinja of the directory, else cfg's chat_template (a
// string, or the "default" of a list); none is an empty result. With `name`: that entry of cfg's
// list, or additional_chat_templates/NAME.jinja; an InputError listing the names otherwise.
ChatTemplateFile find_tokenizer_chat_template(const std::string& tokenizer, const TokenizerConfig& cfg,
                                              const std::optional<std::string>& name);

}  // namespace seqpar
