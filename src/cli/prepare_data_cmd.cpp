// seqpar prepare-data: tokenize text / JSONL / SFT JSONL into a token file (docs/prepare-data.md).
#include <memory>
#include <string>

#include "cli/commands.h"
#include "core/log.h"
#include "data/prepare_data.h"

namespace seqpar {

namespace {

struct PrepareDataArgs {
  PrepareDataOptions options;
  std::string format = "auto", text_unit = "paragraph", eos_token, chat_format, chat_template, chat_template_name,
      chat_template_now;
  bool no_special_tokens = false, quiet = false;
};

void run(PrepareDataArgs& a) {
  PrepareDataOptions& o = a.options;
  o.format = a.format == "auto" ? guess_data_format(o.inputs) : parse_data_format(a.format, "--format");
  o.text_unit = parse_text_unit(a.text_unit, "--text-unit");
  if (!a.eos_token.empty()) o.eos_token = a.eos_token;
  if (!a.chat_format.empty()) o.chat_format = a.chat_format;
  if (!a.chat_template.empty()) o.chat_template_file = a.chat_template;
  if (!a.chat_template_name.empty()) o.chat_template_name = a.chat_template_name;
  if (!a.chat_template_now.empty()) o.chat_template_now = a.chat_template_now;
  o.add_special_tokens = !a.no_special_tokens;
  o.progress = !a.quiet;
  const PrepareDataStats s = prepare_data(o);
  log_info("prepare-data: wrote {}: {} documents, {} tokens ({} trained), {} empty records skipped, {:.1f} s",
           o.output, s.documents, s.tokens, s.trained_tokens, s.skipped, s.seconds);
}

}  // namespace

void add_prepare_data_command(CLI::App& app, int& rc) {
  auto args = std::make_shared<PrepareDataArgs>();
  PrepareDataOptions& o = args->options;
  CLI::App* c = app.add_subcommand(
      "prepare-data", "Tokenize text, JSONL or SFT JSONL files into a token file (document boundaries, SFT loss mask)");
  c->add_option("--tokenizer", o.tokenizer,
                "HF tokenizer.json, SentencePiece tokenizer.model, or a model directory (its tokenizer.json, else "
                "tokenizer.model, else vocab.json + merges.txt)");
  c->add_option("--vocab-file", o.vocab_file,
                "GPT-2's vocab.json, with --merge-file (Megatron's GPT2BPETokenizer files), instead of --tokenizer");
  c->add_option("--merge-file", o.merge_file, "GPT-2's merges.txt, with --vocab-file");
  c->add_option("--input", o.inputs, "input files, read in order")->required();
  c->add_option("--output", o.output, "output token file (written atomically)")->required();
  c->add_option("--format", args->format,
                "auto (jsonl for *.jsonl/*.json inputs, text otherwise) | text | jsonl (a string field per line) | "
                "sft (prompt/completion or chat messages per line)")
      ->capture_default_str();
  c->add_option("--text-unit", args->text_unit,
                "text format: what a document is: paragraph (blank-line separated) | line | file")
      ->capture_default_str();
  c->add_option("--text-field", o.text_field, "jsonl format: the field holding the text")->capture_default_str();
  c->add_option("--threads,--workers", o.threads, "tokenizer threads (0 = all hardware threads, at most 16)")
      ->capture_default_str();
  c->add_flag("--append-eos,--append-eod", o.append_eos,
              "append the EOS token to every document, so the documents are concatenated with it between them as "
              "Megatron's --append-eod does (trained in SFT)");
  c->add_option("--eos-token", args->eos_token,
                "the EOS token (default: eos_token of tokenizer_config.json; with --vocab-file: <|endoftext|>)");
  c->add_flag("--no-special-tokens", args->no_special_tokens,
              "do not add the tokenizer's template tokens (e.g. BOS) to each document");
  c->add_option("--chat-format", args->chat_format,
                "sft format: render chat 'messages' with a built-in format: llama3 | chatml (Qwen's turns) | qwen2.5 "
                "(ChatML with Qwen2.5-Instruct's default system message), instead of the tokenizer's chat template");
  c->add_option("--chat-template", args->chat_template,
                "sft format: render chat 'messages' with this Jinja chat template file instead of the tokenizer's "
                "(default: the tokenizer directory's chat_template.jinja, else tokenizer_config.json's chat_template)");
  c->add_option("--chat-template-name", args->chat_template_name,
                "sft format: which of the tokenizer's named chat templates (a chat_template list in "
                "tokenizer_config.json) to use (default: default)");
  c->add_option("--chat-template-now", args->chat_template_now,
                "the date a chat template's strftime_now() formats, YYYY-MM-DD or YYYY-MM-DDTHH:MM:SS (default: "
                "now), for reproducible output");
  c->add_flag("--quiet", args->quiet, "no progress line on stderr");
  c->callback([args, &rc] {
    run(*args);
    rc = 0;
  });
}

}  // namespace seqpar
