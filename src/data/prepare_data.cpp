#include "data/prepare_data.h"

#include <unistd.h>

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <ctime>
#include <csignal>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <system_error>
#include <thread>

#include "core/error.h"
#include "data/chat_template.h"
#include "data/token_file.h"
#include "io/input_file.h"
#include "io/tokenizer.h"

namespace seqpar {

DataFormat parse_data_format(const std::string& s, const std::string& setting) {
  if (s == "text") return DataFormat::kText;
  if (s == "jsonl") return DataFormat::kJsonl;
  if (s == "sft") return DataFormat::kSft;
  throw InputError(fmt::format("{}={}: expected text, jsonl or sft", setting, s));
}

DataFormat guess_data_format(const std::vector<std::string>& inputs) {
  size_t json_like = 0;
  for (const std::string& in : inputs) {
    const std::string ext = std::filesystem::path(in).extension().string();
    json_like += ext == ".jsonl" || ext == ".json";
  }
  SEQPAR_INPUT_CHECK(json_like == 0 || json_like == inputs.size(),
                     "--format auto: {} of the {} inputs end in .jsonl/.json and the others do not; give --format "
                     "text, jsonl or sft", json_like, inputs.size());
  return json_like > 0 ? DataFormat::kJsonl : DataFormat::kText;
}

TextUnit parse_text_unit(const std::string& s, const std::string& setting) {
  if (s == "paragraph") return TextUnit::kParagraph;
  if (s == "line") return TextUnit::kLine;
  if (s == "file") return TextUnit::kFile;
  throw InputError(fmt::format("{}={}: expected paragraph, line or file", setting, s));
}

// ---- SFT ---------------------------------------------------------------------------------

namespace {

// python's str.strip() (Jinja's trim): Unicode White_Space and the separators U+001C..U+001F.
std::string_view py_strip(std::string_view s) {
  std::vector<char32_t> cps;
  std::vector<size_t> offs;
  tokenizer_detail::decode_utf8(s, cps, offs);
  auto ws = [](char32_t c) {
    return tokenizer_detail::char_class(c) == tokenizer_detail::CharClass::kSpace || (c >= 0x1C && c <= 0x1F);
  };
  size_t b = 0, e = cps.size();
  while (b < e && ws(cps[b])) ++b;
  while (e > b && ws(cps[e - 1])) --e;
  return s.substr(offs[b], offs[e] - offs[b]);
}

TokenizedDoc mask_by_spans(const Tokenizer& tok, const std::string& text, bool add_special_tokens,
                           const std::vector<std::pair<size_t, size_t>>& trained, int32_t eos) {
  TokenizedDoc d;
  std::vector<int64_t> starts;
  d.tokens = tok.encode(text, add_special_tokens, &starts);
  d.mask.resize(d.tokens.size(), 0);
  for (size_t k = 0; k < d.tokens.size(); ++k)
    for (auto [b, e] : trained)
      if (starts[k] >= static_cast<int64_t>(b) && starts[k] < static_cast<int64_t>(e)) d.mask[k] = 1;
  if (eos >= 0) {
    d.tokens.push_back(eos);
    d.mask.push_back(1);
  }
  return d;
}

}  // namespace

RenderedChat render_chat_llama3(const std::vector<ChatMessage>& messages, const std::string& bos_token) {
  RenderedChat r;
  r.text = bos_token;
  for (const ChatMessage& m : messages) {
    r.text += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n";
    const size_t begin = r.text.size();
    r.text += py_strip(m.content);
    r.text += "<|eot_id|>";
    if (m.role == "assistant") r.trained.emplace_back(begin, r.text.size());
  }
  return r;
}

RenderedChat render_chat_chatml(const std::vector<ChatMessage>& messages, const std::string& default_system) {
  RenderedChat r;
  auto turn = [&](const std::string& role, const std::string& content) {
    r.text += "<|im_start|>" + role + "\n";
    const size_t begin = r.text.size();
    r.text += content + "<|im_end|>";
    if (role == "assistant") r.trained.emplace_back(begin, r.text.size());
    r.text += "\n";
  };
  if (!default_system.empty() && (messages.empty() || messages[0].role != "system")) turn("system", default_system);
  for (const ChatMessage& m : messages) turn(m.role, m.content);
  return r;
}

std::string chat_format_names(const char* sep) {
  std::string s;
  for (const char* f : kChatFormats) s += (s.empty() ? "" : sep) + std::string(f);
  return s;
}

TokenizedDoc tokenize_prompt_completion(const Tokenizer& tok, const std::string& prompt,
                                        const std::string& completion, bool add_special_tokens, int32_t eos) {
  // The suffix tokens of a template start at text.size(): the span's end is one past it.
  return mask_by_spans(tok, prompt + completion, add_special_tokens,
                       {{prompt.size(), prompt.size() + completion.size() + 1}}, eos);
}

TokenizedDoc tokenize_chat(const Tokenizer& tok, const RenderedChat& chat, int32_t eos) {
  return mask_by_spans(tok, chat.text, /*add_special_tokens=*/false, chat.trained, eos);
}

// ---- chat templates ----------------------------------------------------------------------

namespace {

constexpr InputKind kChatTemplateInput{"chat template", uint64_t{16} << 20};

std::tm current_local_time() {
  const std::time_t t = std::time(nullptr);
  std::tm now{};
  localtime_r(&t, &now);  // transformers' strftime_now formats datetime.now(): local time
  return now;
}

}  // namespace

std::string read_chat_template(const std::string& path) { return read_input_file(path, kChatTemplateInput); }

ChatTemplateFile find_tokenizer_chat_template(const std::string& tokenizer, const TokenizerConfig& cfg,
                                              const std::optional<std::string>& name) {
  namespace fs = std::filesystem;
  const fs::path given(tokenizer);
  const fs::path dir = fs::is_directory(given) ? given : given.parent_path();
  const fs::path jinja_file = dir / "chat_template.jinja";
  const fs::path extra_dir = dir / "additional_chat_templates";
  if (!name || *name == "default") {
    // transformers (>= 4.50) saves the template as chat_template.jinja, and loads it in preference
    // to tokenizer_config.json's.
    if (fs::is_regular_file(jinja_file))
      return {read_chat_template(jinja_file.string()), jinja_file.string(), jinja_file.string()};
    if (cfg.chat_template)
      return {*cfg.chat_template, cfg.path,
              cfg.named_chat_templates.empty() ? cfg.path + " (chat_template)"
                                               : cfg.path + " (chat_template 'default')"};
    if (!name) return {};
  }
  std::vector<std::string> names;
  for (const auto& [n, t] : cfg.named_chat_templates) {
    if (n == *name) return {t, cfg.path + " '" + n + "'", cfg.path + " (chat_template '" + n + "')"};
    names.push_back("'" + n + "'");
  }
  if (fs::is_regular_file(jinja_file) && *name != "default") names.insert(names.begin(), "'default'");
  std::error_code ec;
  if (fs::is_directory(extra_dir, ec))
    for (const auto& e : fs::directory_iterator(extra_dir, ec)) {
      if (e.path().extension() != ".jinja") continue;
      if (e.path().stem() == *name) return {read_chat_template(e.path().string()), e.path().string(), e.path().string()};
      names.push_back("'" + e.path().stem().string() + "'");
    }
  throw InputError(fmt::format(
      "--chat-template-name={}: the tokenizer directory '{}' has no chat template of that name ({}); the named "
      "templates are a chat_template list of {{name, template}} in tokenizer_config.json, chat_template.jinja "
      "('default') and additional_chat_templates/NAME.jinja",
      *name, dir.empty() ? "." : dir.string(),
      names.empty() ? std::string("it has no named templates") : "it has " + fmt::format("{}", fmt::join(names, ", "))));
}

// ---- the pipeline ------------------------------------------------------------------------

namespace {

using json = nlohmann::ordered_json;  // key order kept: a chat template sees each message's keys as written

// One record of the input: its text and the line it starts on.
struct Unit {
  int64_t line;
  std::string text;
};

struct Chunk {
  int64_t seq;
  size_t file;
  std::vector<Unit> units;
  int64_t bytes = 0;
};

struct ChunkResult {
  std::vector<TokenizedDoc> docs;
  int64_t skipped = 0, bytes = 0;
  std::string error;  // the first problem, "<file>:<line>: ..."
};

bool blank(std::string_view line) {
  return std::all_of(line.begin(), line.end(), [](char c) { return c == ' ' || c == '\t' || c == '\r'; });
}

std::string type_name(const json& v) {
  return v.is_null() ? "null" : v.is_string() ? "a string" : v.is_number() ? "a number" : v.is_boolean() ? "a boolean"
                                : v.is_array() ? "an array" : "an object";
}

class Pipeline {
 public:
  Pipeline(const PrepareDataOptions& o, const Tokenizer& tok, int32_t eos, std::optional<std::string> bos_for_chat,
           const ChatTemplate* chat_template, std::string chat_error)
      : o_(o),
        tok_(tok),
        eos_(eos),
        chat_bos_(std::move(bos_for_chat)),
        chat_template_(chat_template),
        chat_error_(std::move(chat_error)) {}

  // The chat format's rendering (--chat-format): checks the roles it can render.
  RenderedChat render(const std::vector<ChatMessage>& msgs) const {
    const std::string& f = *o_.chat_format;
    if (f == "llama3") return render_chat_llama3(msgs, *chat_bos_);
    if (f == "chatml") return render_chat_chatml(msgs, "");
    SEQPAR_CHECK(f == "qwen2.5", "chat format {} has no renderer (kChatFormats: {})", f, chat_format_names(", "));
    // Qwen2.5-Instruct's template without tools: system (its default when the first message is not
    // one), user and assistant turns; tool calls and tool results have their own markup there.
    for (size_t i = 0; i < msgs.size(); ++i)
      SEQPAR_INPUT_CHECK(msgs[i].role == "system" || msgs[i].role == "user" || msgs[i].role == "assistant",
                         "messages[{}]: role '{}' is not one --chat-format qwen2.5 renders (system, user, assistant; "
                         "--chat-format chatml renders any role as a plain turn)",
                         i, msgs[i].role);
    return render_chat_chatml(msgs, kQwen25DefaultSystem);
  }

  ChunkResult process(const Chunk& c) const {
    ChunkResult r;
    r.bytes = c.bytes;
    for (const Unit& u : c.units) {
      try {
        process_unit(u, r);
      } catch (const InputError& e) {
        r.error = fmt::format("{}:{}: {}", o_.inputs[c.file], u.line, e.what());
        return r;
      }
    }
    return r;
  }

 private:
  void add(ChunkResult& r, const std::string& text) const {
    if (text.empty()) {
      ++r.skipped;
      return;
    }
    TokenizedDoc d;
    d.tokens = tok_.encode(text, o_.add_special_tokens);
    if (eos_ >= 0) d.tokens.push_back(eos_);
    r.docs.push_back(std::move(d));
  }

  void process_unit(const Unit& u, ChunkResult& r) const {
    if (o_.format == DataFormat::kText) return add(r, u.text);
    check_json_depth(u.text, "this record");
    json j;
    try {
      j = json::parse(u.text);
    } catch (const json::exception& e) {
      throw InputError(fmt::format("not valid JSON: {}", e.what()));
    }
    SEQPAR_INPUT_CHECK(j.is_object(), "expected a JSON object, got {}", type_name(j));
    if (o_.format == DataFormat::kJsonl) {
      SEQPAR_INPUT_CHECK(j.contains(o_.text_field), "field '{}' is missing (--text-field {})", o_.text_field,
                         o_.text_field);
      const json& t = j[o_.text_field];
      SEQPAR_INPUT_CHECK(t.is_string(), "field '{}' must be a string, got {}", o_.text_field, type_name(t));
      return add(r, t.get<std::string>());
    }
    // SFT
    auto str = [&](const json& obj, const char* field, const std::string& at) {
      SEQPAR_INPUT_CHECK(obj.contains(field), "{}field '{}' is missing", at, field);
      SEQPAR_INPUT_CHECK(obj[field].is_string(), "{}field '{}' must be a string, got {}", at, field,
                         type_name(obj[field]));
      return obj[field].get<std::string>();
    };
    if (j.contains("messages")) {
      SEQPAR_INPUT_CHECK(chat_error_.empty(), "{}", chat_error_);
      const json& ms = j["messages"];
      SEQPAR_INPUT_CHECK(ms.is_array() && !ms.empty(), "field 'messages' must be a non-empty array, got {}",
                         type_name(ms));
      if (chat_template_) {
        // The template reads the messages as they are (content may be a list, tool calls, ...).
        for (size_t i = 0; i < ms.size(); ++i)
          SEQPAR_INPUT_CHECK(ms[i].is_object(), "messages[{}]: expected an object, got {}", i, type_name(ms[i]));
        r.docs.push_back(tokenize_chat(tok_, chat_template_->render(ms), eos_));
        return;
      }
      std::vector<ChatMessage> msgs;
      for (size_t i = 0; i < ms.size(); ++i) {
        const std::string at = fmt::format("messages[{}]: ", i);
        SEQPAR_INPUT_CHECK(ms[i].is_object(), "{}expected an object with 'role' and 'content', got {}", at,
                           type_name(ms[i]));
        msgs.push_back({str(ms[i], "role", at), str(ms[i], "content", at)});
      }
      r.docs.push_back(tokenize_chat(tok_, render(msgs), eos_));
      return;
    }
    SEQPAR_INPUT_CHECK(j.contains("prompt") || j.contains("completion"),
                       "an SFT record needs 'prompt' and 'completion' strings, or 'messages'");
    const std::string prompt = str(j, "prompt", ""), completion = str(j, "completion", "");
    r.docs.push_back(tokenize_prompt_completion(tok_, prompt, completion, o_.add_special_tokens, eos_));
  }

  const PrepareDataOptions& o_;
  const Tokenizer& tok_;
  int32_t eos_;
  std::optional<std::string> chat_bos_;
  const ChatTemplate* chat_template_;  // null: chat_format, or no template (chat_error_)
  std::string chat_error_;
};

// Reads the inputs and cuts them into chunks of whole records, calling submit(chunk) for each.
template <typename Submit>
void read_chunks(const PrepareDataOptions& o, Submit&& submit) {
  int64_t seq = 0;
  for (size_t f = 0; f < o.inputs.size(); ++f) {
    const std::string& path = o.inputs[f];
    std::ifstream in(path, std::ios::binary);
    SEQPAR_INPUT_CHECK(in.good(), "--input '{}': cannot open", path);
    Chunk cur{seq, f, {}, 0};
    auto flush = [&](bool force) {
      if (cur.units.empty() || (!force && cur.bytes < o.chunk_bytes)) return;
      submit(std::move(cur));
      cur = Chunk{++seq, f, {}, 0};
    };
    auto strip_bom = [](std::string& s) {
      if (s.rfind("\xEF\xBB\xBF", 0) == 0) s.erase(0, 3);
    };
    if (o.format == DataFormat::kText && o.text_unit == TextUnit::kFile) {
      std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      SEQPAR_INPUT_CHECK(!in.bad(), "--input '{}': read error", path);
      strip_bom(all);
      cur.bytes = static_cast<int64_t>(all.size());
      cur.units.push_back({1, std::move(all)});
      flush(true);
      continue;
    }
    std::string line, block;
    int64_t line_no = 0, block_line = 0;
    auto end_block = [&] {
      if (block.empty()) return;
      if (block.back() == '\r') block.pop_back();  // the block's last line break is not part of it
      cur.units.push_back({block_line, std::move(block)});
      block.clear();
      flush(false);
    };
    while (std::getline(in, line)) {
      ++line_no;
      cur.bytes += static_cast<int64_t>(line.size()) + 1;
      if (line_no == 1) strip_bom(line);
      if (o.format == DataFormat::kText && o.text_unit == TextUnit::kParagraph) {
        if (blank(line)) {
          end_block();
          continue;
        }
        if (block.empty()) {
          block_line = line_no;
        } else {
          block += '\n';
        }
        block += line;
        continue;
      }
      if (blank(line)) continue;
      if (o.format == DataFormat::kText && !line.empty() && line.back() == '\r') line.pop_back();
      cur.units.push_back({line_no, std::move(line)});
      line.clear();
      flush(false);
    }
    SEQPAR_INPUT_CHECK(!in.bad(), "--input '{}': read error after line {}", path, line_no);
    end_block();
    flush(true);
  }
}

// Progress on stderr: a line rewritten in place on a terminal, one line every 10 s otherwise.
class Progress {
 public:
  explicit Progress(bool on) : on_(on), tty_(isatty(STDERR_FILENO) != 0), t0_(clock::now()), last_(t0_) {}
  double seconds() const { return std::chrono::duration<double>(clock::now() - t0_).count(); }
  void update(const PrepareDataStats& s, bool final) {
    if (!on_) return;
    const auto now = clock::now();
    if (!final && now - last_ < std::chrono::milliseconds(tty_ ? 200 : 10000)) return;
    last_ = now;
    const double secs = std::max(seconds(), 1e-9);
    std::fprintf(stderr, "%sprepare-data: %lld documents, %lld tokens, %.1f MB read, %.1f MB/s%s",
                 tty_ ? "\r" : "", static_cast<long long>(s.documents), static_cast<long long>(s.tokens),
                 s.input_bytes / 1e6, s.input_bytes / 1e6 / secs, (tty_ && !final) ? "" : "\n");
    std::fflush(stderr);
  }

 private:
  using clock = std::chrono::steady_clock;
  bool on_, tty_;
  clock::time_point t0_, last_;
};

}  // namespace

namespace {

// The temporaries (OUTPUT.tmp.<pid>.<n>, TokenFileWriter's) of earlier runs writing `output` that
// were killed before they finished: removed, unless their process still runs (another
// prepare-data writing the same file). A killed run's destructor never ran, so nobody else will.
void remove_stale_temporaries(const std::string& output) {
  namespace fs = std::filesystem;
  const fs::path out(output);
  const fs::path dir = out.parent_path().empty() ? fs::path(".") : out.parent_path();
  const std::string prefix = out.filename().string() + ".tmp.";
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    const std::string rest = name.substr(prefix.size());
    const size_t dot = rest.find('.');
    if (dot == 0 || dot == std::string::npos || rest.find_first_not_of("0123456789.") != std::string::npos) continue;
    pid_t pid = 0;
    const auto [end, perr] = std::from_chars(rest.data(), rest.data() + dot, pid);
    if (perr != std::errc() || end != rest.data() + dot) continue;  // not a pid: not ours
    if (pid > 0 && ::kill(pid, 0) == 0) continue;                   // still being written
    fs::remove(e.path(), ec);
    if (!ec) std::fprintf(stderr, "prepare-data: removed %s, left by a run that did not finish\n", e.path().c_str());
  }
}

}  // namespace

PrepareDataStats prepare_data(const PrepareDataOptions& o) {
  SEQPAR_INPUT_CHECK(!o.inputs.empty(), "--input: at least one input file is needed");
  SEQPAR_INPUT_CHECK(!o.output.empty(), "--output: an output path is needed");
  SEQPAR_INPUT_CHECK(o.chunk_bytes > 0, "chunk_bytes={} must be positive", o.chunk_bytes);
  SEQPAR_INPUT_CHECK(o.threads >= 0 && o.threads <= kMaxPrepareThreads,
                     "--threads={} must be in [0, {}] (0 = all hardware threads, at most 16)", o.threads,
                     kMaxPrepareThreads);
  SEQPAR_INPUT_CHECK(!o.text_field.empty(), "--text-field must not be empty");
  namespace fs = std::filesystem;
  for (const std::string& in : o.inputs) {
    SEQPAR_INPUT_CHECK(fs::is_regular_file(in), "--input '{}': no such file", in);
    SEQPAR_INPUT_CHECK(!fs::exists(o.output) || !fs::equivalent(in, o.output),
                       "--output '{}' is also an --input: refusing to overwrite the data being read", o.output);
  }
  if (o.chat_format)
    SEQPAR_INPUT_CHECK(std::find(kChatFormats.begin(), kChatFormats.end(), *o.chat_format) != kChatFormats.end(),
                       "--chat-format={}: not a built-in chat format (built in: {}; a Jinja template file is given "
                       "with --chat-template)",
                       *o.chat_format, chat_format_names(", "));
  // The chat settings render SFT 'messages' only: with another format they would be read and not applied.
  for (const auto& [flag, value] : {std::pair{"--chat-format", &o.chat_format},
                                    std::pair{"--chat-template", &o.chat_template_file},
                                    std::pair{"--chat-template-name", &o.chat_template_name},
                                    std::pair{"--chat-template-now", &o.chat_template_now}})
    SEQPAR_INPUT_CHECK(!*value || o.format == DataFormat::kSft,
                       "{}={}: a chat setting renders the 'messages' of SFT records, and --format is {}; give "
                       "--format sft",
                       flag, value->value_or(""), o.format == DataFormat::kText ? "text" : "jsonl");
  SEQPAR_INPUT_CHECK(!o.chat_format || !o.chat_template_file,
                     "--chat-format={} and --chat-template={} both say how chat 'messages' are rendered (a built-in "
                     "format, a template file): give one of them",
                     o.chat_format.value_or(""), o.chat_template_file.value_or(""));
  SEQPAR_INPUT_CHECK(!o.chat_template_name || (!o.chat_format && !o.chat_template_file),
                     "--chat-template-name={} picks one of the tokenizer's named chat templates, and {} replaces the "
                     "tokenizer's template: give one of them",
                     o.chat_template_name.value_or(""), o.chat_format ? "--chat-format" : "--chat-template");

  const bool gpt2_files = !o.vocab_file.empty() || !o.merge_file.empty();
  SEQPAR_INPUT_CHECK(!gpt2_files || o.tokenizer.empty(),
                     "--tokenizer={} and --vocab-file/--merge-file both name a tokenizer: give one of them",
                     o.tokenizer);
  SEQPAR_INPUT_CHECK(!gpt2_files || (!o.vocab_file.empty() && !o.merge_file.empty()),
                     "--vocab-file and --merge-file go together (GPT-2's vocab.json and merges.txt): {} is missing",
                     o.vocab_file.empty() ? "--vocab-file" : "--merge-file");
  SEQPAR_INPUT_CHECK(gpt2_files || !o.tokenizer.empty(),
                     "--tokenizer: a tokenizer is needed (tokenizer.json or tokenizer.model, or --vocab-file with "
                     "--merge-file)");
  const auto tok = gpt2_files ? Tokenizer::load_gpt2_files(o.vocab_file, o.merge_file) : Tokenizer::load(o.tokenizer);
  const TokenizerConfig cfg = read_tokenizer_config(gpt2_files ? o.vocab_file : o.tokenizer);
  int32_t eos = -1;
  if (o.append_eos) {
    std::optional<std::string> name = o.eos_token ? o.eos_token : cfg.eos_token;
    // A SentencePiece model names its own (`</s>`): the EOS its model was trained with.
    if (!name) name = tok->own_eos_token();
    // Megatron's GPT2BPETokenizer.eod, for GPT-2's files (given by name or in a --tokenizer directory).
    if (!name && (gpt2_files || std::filesystem::is_directory(Tokenizer::resolve(o.tokenizer)))) name = "<|endoftext|>";
    SEQPAR_INPUT_CHECK(name.has_value(), "--append-eos: no EOS token: {} has no eos_token; name one with --eos-token",
                       cfg.path.empty() ? "there is no tokenizer_config.json next to " + o.tokenizer : cfg.path);
    const auto id = tok->token_to_id(*name);
    SEQPAR_INPUT_CHECK(id.has_value(), "--append-eos: EOS token '{}' is not in the vocabulary of {}", *name,
                       o.tokenizer);
    eos = *id;
  }
  // Chat `messages` need a template: a built-in format (--chat-format), a template file
  // (--chat-template), or the tokenizer's own.
  std::string chat_error, chat_source;
  std::optional<std::string> chat_bos;
  std::optional<ChatTemplate> chat_template;
  if (o.chat_format && *o.chat_format != "llama3") {
    for (const char* t : {"<|im_start|>", "<|im_end|>"})
      SEQPAR_INPUT_CHECK(tok->token_to_id(t).has_value(),
                         "--chat-format={}: the tokenizer {} has no '{}' token: it is not a ChatML (Qwen) tokenizer",
                         *o.chat_format, o.tokenizer, t);
    chat_source = fmt::format("the built-in format {} (--chat-format)", *o.chat_format);
  } else if (o.chat_format) {
    chat_bos = cfg.bos_token.value_or("<|begin_of_text|>");
    for (const char* t : {"<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"})
      SEQPAR_INPUT_CHECK(tok->token_to_id(t).has_value(),
                         "--chat-format=llama3: the tokenizer {} has no '{}' token: it is not a Llama-3 tokenizer",
                         o.tokenizer, t);
    SEQPAR_INPUT_CHECK(chat_bos->empty() || tok->token_to_id(*chat_bos).has_value(),
                       "--chat-format=llama3: bos_token '{}' of {} is not in the vocabulary", *chat_bos, cfg.path);
    chat_source = "the built-in format llama3 (--chat-format)";
  } else if (o.format == DataFormat::kSft) {  // only SFT records have 'messages'
    const std::tm now = o.chat_template_now ? parse_template_time(*o.chat_template_now, "--chat-template-now")
                                            : current_local_time();
    const ChatTemplateFile found = o.chat_template_file
                                       ? ChatTemplateFile{read_chat_template(*o.chat_template_file), *o.chat_template_file,
                                                          *o.chat_template_file + " (--chat-template)"}
                                       : find_tokenizer_chat_template(gpt2_files ? o.vocab_file : o.tokenizer, cfg,
                                                                      o.chat_template_name);
    if (!found.name.empty()) {
      // A parse error names name:line:column. The tokenizer's own template, not asked for by a flag,
      // only stops a run that has chat records: prompt/completion data does not need it.
      try {
        chat_template.emplace(found.source, found.name, cfg.special_tokens, now);
        chat_source = "the chat template " + found.description;
      } catch (const InputError& e) {
        if (o.chat_template_file || o.chat_template_name) throw;
        chat_error =
            fmt::format("{}; pass --chat-template FILE or --chat-format {}", e.what(), chat_format_names("|"));
        chat_source = "none: the chat template " + found.description + " does not parse";
      }
    } else {
      const fs::path given(gpt2_files ? o.vocab_file : o.tokenizer);
      const std::string dir = (fs::is_directory(given) ? given : given.parent_path()).string();
      chat_error = fmt::format(
          "chat 'messages' need a chat template, and the tokenizer directory '{}' has none (no chat_template.jinja, "
          "no chat_template in tokenizer_config.json); pass --chat-template FILE (a Jinja chat template) or "
          "--chat-format {} (built in), or give 'prompt' and 'completion'",
          dir.empty() ? "." : dir, chat_format_names("|"));
      chat_source = "none (records with 'messages' are refused)";
    }
  }
  if (o.progress && o.format == DataFormat::kSft)
    std::fprintf(stderr, "prepare-data: chat 'messages' rendered with %s\n", chat_source.c_str());

  const Pipeline pipeline(o, *tok, eos, chat_bos, chat_template ? &*chat_template : nullptr, chat_error);
  int threads = o.threads;
  if (threads == 0) threads = static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 16u));
  const size_t max_in_flight = static_cast<size_t>(threads) * 4;

  std::mutex mu;
  std::condition_variable work_cv, done_cv;
  std::deque<Chunk> todo;
  std::map<int64_t, ChunkResult> done;
  bool closing = false;
  std::vector<std::thread> workers;
  auto worker = [&] {
    for (;;) {
      Chunk c;
      {
        std::unique_lock lock(mu);
        work_cv.wait(lock, [&] { return closing || !todo.empty(); });
        if (todo.empty()) return;
        c = std::move(todo.front());
        todo.pop_front();
      }
      ChunkResult r;
      try {
        r = pipeline.process(c);
      } catch (const std::exception& e) {  // not an input problem: keep its text, stop the run
        r.error = fmt::format("{}: {}", o.inputs[c.file], e.what());
      }
      {
        std::lock_guard lock(mu);
        done.emplace(c.seq, std::move(r));
      }
      done_cv.notify_all();
    }
  };
  auto stop_workers = [&] {
    {
      std::lock_guard lock(mu);
      closing = true;
      todo.clear();
    }
    work_cv.notify_all();
    for (auto& t : workers) t.join();
    workers.clear();
  };
  // A thread that cannot start (the process's or the machine's thread limit) stops the ones that
  // did, joined, before the error: never std::terminate on a joinable thread.
  workers.reserve(static_cast<size_t>(threads));
  for (int w = 0; w < threads; ++w) {
    try {
      workers.emplace_back(worker);
    } catch (const std::system_error& e) {
      stop_workers();
      throw InputError(fmt::format("--threads={}: could not start tokenizer thread {} of {}: {}; use fewer threads",
                                   o.threads, w + 1, threads, e.what()));
    }
  }

  PrepareDataStats stats;
  Progress progress(o.progress);
  remove_stale_temporaries(o.output);
  TokenFileWriter writer(o.output, o.format == DataFormat::kSft);
  int64_t submitted = 0, written = 0;
  // Writes finished chunks in order; with `wait_below`, first waits until fewer than that many
  // chunks are in flight.
  auto drain = [&](size_t wait_below) {
    for (;;) {
      ChunkResult r;
      {
        std::unique_lock lock(mu);
        if (static_cast<size_t>(submitted - written) >= wait_below || done.count(written))
          done_cv.wait(lock, [&] { return done.count(written) > 0; });
        auto it = done.find(written);
        if (it == done.end()) return;
        r = std::move(it->second);
        done.erase(it);
      }
      ++written;
      SEQPAR_INPUT_CHECK(r.error.empty(), "{}", r.error);
      for (TokenizedDoc& d : r.docs) {
        if (d.tokens.empty()) {  // an empty text with no template tokens
          ++stats.skipped;
          continue;
        }
        writer.add_document(d.tokens, d.mask);
        ++stats.documents;
        stats.tokens += static_cast<int64_t>(d.tokens.size());
        stats.trained_tokens += d.mask.empty() ? static_cast<int64_t>(d.tokens.size())
                                               : std::count(d.mask.begin(), d.mask.end(), uint8_t{1});
      }
      stats.skipped += r.skipped;
      stats.input_bytes += r.bytes;
      progress.update(stats, false);
    }
  };
  try {
    read_chunks(o, [&](Chunk&& c) {
      drain(max_in_flight);
      {
        std::lock_guard lock(mu);
        todo.push_back(std::move(c));
        ++submitted;
      }
      work_cv.notify_one();
    });
    while (written < submitted) drain(1);
  } catch (...) {
    stop_workers();
    throw;  // the writer's destructor removes its temporary file
  }
  stop_workers();
  writer.finish();
  stats.seconds = progress.seconds();
  progress.update(stats, true);
  return stats;
}

}  // namespace seqpar
