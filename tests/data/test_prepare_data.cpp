// prepare-data: round trips through the token file, SFT masks, chat rendering against Jinja +
// HF, thread-count independence of the output bytes, and the error messages.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "data/prepare_data.h"
#include "data/token_file.h"
#include "io/tokenizer.h"
#include "test_util.h"

namespace seqpar {
namespace {

using testing::read_file;
using testing::write_file;

using nlohmann::json;
using testing::source_path;

const std::string kLlama = "tests/fixtures/tokenizer/llama3/tokenizer.json";
const std::string kGpt2 = "tests/fixtures/tokenizer/gpt2/tokenizer.json";

std::string error_of(const PrepareDataOptions& o) {
  try {
    prepare_data(o);
  } catch (const InputError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an InputError";
  return "";
}

PrepareDataOptions options(const std::string& dir, const std::string& input, DataFormat format,
                           const std::string& tokenizer = kLlama) {
  PrepareDataOptions o;
  o.tokenizer = source_path(tokenizer);
  o.inputs = {input};
  o.output = dir + "/tokens.bin";
  o.format = format;
  o.threads = 2;
  o.progress = false;
  return o;
}

TEST(PrepareData, TextParagraphsRoundTrip) {
  const std::string dir = testing::temp_dir();
  // A BOM, CRLF line ends, whitespace-only separator lines, a trailing block without a newline.
  write_file(dir + "/a.txt",
             "\xEF\xBB\xBFHello world.\r\nSecond line of doc 1.\r\n\r\n\n  \t\nDoc 2: café 中文 😀\n\n\nDoc 3\n  "
             "indented\n  trailing   ");
  write_file(dir + "/b.txt", "Doc 4 in another file\n");
  PrepareDataOptions o = options(dir, dir + "/a.txt", DataFormat::kText);
  o.inputs.push_back(dir + "/b.txt");
  const PrepareDataStats s = prepare_data(o);
  const std::vector<std::string> want = {"Hello world.\r\nSecond line of doc 1.", "Doc 2: café 中文 😀",
                                         "Doc 3\n  indented\n  trailing   ", "Doc 4 in another file"};
  const auto tok = Tokenizer::load(o.tokenizer);
  TokenFile f(o.output);
  ASSERT_EQ(f.num_docs(), 4);
  EXPECT_FALSE(f.has_loss_mask());
  int64_t n = 0;
  for (int64_t d = 0; d < 4; ++d) {
    const auto ids = f.doc_tokens(d);
    EXPECT_EQ(ids, tok->encode(want[static_cast<size_t>(d)])) << d;
    EXPECT_EQ(ids[0], *tok->token_to_id("<|begin_of_text|>"));
    EXPECT_EQ(tok->decode(ids, /*skip_special_tokens=*/true), want[static_cast<size_t>(d)]);
    n += static_cast<int64_t>(ids.size());
  }
  EXPECT_EQ(s.documents, 4);
  EXPECT_EQ(s.tokens, n);
  EXPECT_EQ(s.trained_tokens, n);

  // line and file units
  o.inputs = {dir + "/a.txt"};
  o.text_unit = TextUnit::kLine;
  prepare_data(o);
  TokenFile lines(o.output);
  ASSERT_EQ(lines.num_docs(), 6);
  EXPECT_EQ(lines.doc_tokens(1), tok->encode("Second line of doc 1."));
  EXPECT_EQ(lines.doc_tokens(5), tok->encode("  trailing   "));
  o.text_unit = TextUnit::kFile;
  o.add_special_tokens = false;
  prepare_data(o);
  TokenFile whole(o.output);
  ASSERT_EQ(whole.num_docs(), 1);
  EXPECT_EQ(tok->decode(whole.doc_tokens(0)), read_file(dir + "/a.txt").substr(3));  // BOM dropped
}

TEST(PrepareData, JsonlRoundTripWithEos) {
  const std::string dir = testing::temp_dir();
  write_file(dir + "/d.jsonl",
             "{\"body\": \"first document\", \"id\": 1}\n\n{\"body\": \"\"}\r\n{\"body\": \"third\\nwith newline "
             "<|eot_id|> special\"}\n");
  PrepareDataOptions o = options(dir, dir + "/d.jsonl", DataFormat::kJsonl);
  o.text_field = "body";
  o.append_eos = true;
  const PrepareDataStats s = prepare_data(o);
  EXPECT_EQ(s.documents, 2);
  EXPECT_EQ(s.skipped, 1);
  const auto tok = Tokenizer::load(o.tokenizer);
  const int32_t eos = *tok->token_to_id("<|end_of_text|>");  // tokenizer_config.json's eos_token
  TokenFile f(o.output);
  ASSERT_EQ(f.num_docs(), 2);
  auto want = tok->encode("first document");
  want.push_back(eos);
  EXPECT_EQ(f.doc_tokens(0), want);
  want = tok->encode("third\nwith newline <|eot_id|> special");
  want.push_back(eos);
  EXPECT_EQ(f.doc_tokens(1), want);
  // --eos-token overrides the config.
  o.eos_token = "<|eot_id|>";
  prepare_data(o);
  EXPECT_EQ(TokenFile(o.output).doc_tokens(0).back(), *tok->token_to_id("<|eot_id|>"));
}

// A SentencePiece model alone (no tokenizer_config.json beside it) names its own EOS, </s>: that is
// what --append-eos appends.
TEST(PrepareData, AppendEosTakesASentencePieceModelsOwnEos) {
  if (!tokenizer_detail::sentencepiece_available()) GTEST_SKIP() << "built without SentencePiece";
  const std::string dir = testing::temp_dir();
  std::filesystem::copy_file(source_path("tests/fixtures/tokenizer/sentencepiece/tokenizer.model"),
                             dir + "/tokenizer.model");
  write_file(dir + "/a.jsonl", "{\"text\": \"first document\"}\n");
  PrepareDataOptions o = options(dir, dir + "/a.jsonl", DataFormat::kJsonl);
  o.tokenizer = dir + "/tokenizer.model";
  o.append_eos = true;
  prepare_data(o);
  const auto tok = Tokenizer::load(o.tokenizer);
  ASSERT_TRUE(tok->own_eos_token().has_value());
  EXPECT_EQ(*tok->own_eos_token(), "</s>");
  EXPECT_EQ(TokenFile(o.output).doc_tokens(0).back(), *tok->token_to_id("</s>"));
}

// --tokenizer DIR: the directory's tokenizer.json, and its tokenizer_config.json's eos_token; a
// directory of GPT-2's files ends documents with <|endoftext|> as --vocab-file / --merge-file do.
TEST(PrepareData, TokenizerDirectory) {
  const std::string dir = testing::temp_dir();
  write_file(dir + "/d.txt", "first document\n\nsecond one");
  PrepareDataOptions o = options(dir, dir + "/d.txt", DataFormat::kText, "tests/fixtures/tokenizer/llama3");
  o.append_eos = true;
  EXPECT_EQ(prepare_data(o).documents, 2);
  const auto tok = Tokenizer::load(source_path(kLlama));
  auto want = tok->encode("first document");
  want.push_back(*tok->token_to_id("<|end_of_text|>"));
  EXPECT_EQ(TokenFile(o.output).doc_tokens(0), want);
  o = options(dir, dir + "/d.txt", DataFormat::kText, "tests/fixtures/tokenizer/gpt2_files");
  o.append_eos = true;
  prepare_data(o);
  const auto gpt2 = Tokenizer::load(source_path("tests/fixtures/tokenizer/gpt2_files"));
  want = gpt2->encode("second one");
  want.push_back(*gpt2->token_to_id("<|endoftext|>"));
  EXPECT_EQ(TokenFile(o.output).doc_tokens(1), want);
}

TEST(PrepareData, SftPromptCompletionMasks) {
  const std::string dir = testing::temp_dir();
  write_file(dir + "/sft.jsonl",
             "{\"prompt\": \"Question: what is 2+2?\\nAnswer:\", \"completion\": \" 4, of course.\"}\n"
             "{\"prompt\": \"Translate 'chat':\", \"completion\": \" cat 🐈\"}\n");
  PrepareDataOptions o = options(dir, dir + "/sft.jsonl", DataFormat::kSft);
  o.append_eos = true;
  const PrepareDataStats s = prepare_data(o);
  const auto tok = Tokenizer::load(o.tokenizer);
  TokenFile f(o.output);
  ASSERT_TRUE(f.has_loss_mask());
  ASSERT_EQ(f.num_docs(), 2);
  const std::vector<std::pair<std::string, std::string>> pc = {{"Question: what is 2+2?\nAnswer:", " 4, of course."},
                                                               {"Translate 'chat':", " cat 🐈"}};
  int64_t trained = 0;
  for (int64_t d = 0; d < 2; ++d) {
    const auto& [prompt, completion] = pc[static_cast<size_t>(d)];
    const auto ids = f.doc_tokens(d);
    std::vector<uint8_t> mask(ids.size());
    f.read_loss_mask(f.doc_begin(d), f.doc_end(d), mask.data());
    // The ids are those of prompt + completion, then EOS.
    auto want = tok->encode(prompt + completion);
    want.push_back(*tok->token_to_id("<|end_of_text|>"));
    ASSERT_EQ(ids, want);
    // Masked: BOS and the prompt; trained: the completion and EOS. Here the boundary is clean,
    // so each part decodes back exactly.
    std::vector<int32_t> masked_ids, trained_ids;
    for (size_t k = 0; k < ids.size(); ++k) (mask[k] ? trained_ids : masked_ids).push_back(ids[k]);
    EXPECT_EQ(tok->decode(masked_ids), "<|begin_of_text|>" + prompt);
    EXPECT_EQ(tok->decode(trained_ids), completion + "<|end_of_text|>");
    EXPECT_EQ(mask.back(), 1);
    trained += static_cast<int64_t>(trained_ids.size());
  }
  EXPECT_EQ(s.trained_tokens, trained);
}

TEST(PrepareData, ChatLlama3MatchesJinjaAndHuggingFace) {
  const json fx = json::parse(read_file(source_path("tests/fixtures/tokenizer/expected.json")));
  const auto tok = Tokenizer::load(source_path(kLlama));
  ASSERT_FALSE(fx["chats"].empty());
  for (const auto& c : fx["chats"]) {
    std::vector<ChatMessage> msgs;
    std::string assistant;
    for (const auto& m : c["messages"]) {
      msgs.push_back({m["role"], m["content"]});
      if (m["role"] == "assistant") {
        std::string content = m["content"];
        content.erase(0, content.find_first_not_of(" \n"));
        content.erase(content.find_last_not_of(" \n") + 1);
        assistant += content + "<|eot_id|>";
      }
    }
    const RenderedChat r = render_chat_llama3(msgs, "<|begin_of_text|>");
    EXPECT_EQ(r.text, c["rendered"].get<std::string>());
    const TokenizedDoc d = tokenize_chat(*tok, r, -1);
    EXPECT_EQ(d.tokens, c["ids"].get<std::vector<int32_t>>());
    std::vector<int32_t> trained_ids;
    for (size_t k = 0; k < d.tokens.size(); ++k)
      if (d.mask[k]) trained_ids.push_back(d.tokens[k]);
    EXPECT_EQ(tok->decode(trained_ids), assistant);
  }

  // Through the pipeline: the Jinja template of tokenizer_config.json and --chat-format llama3
  // render the same ids.
  const std::string dir = testing::temp_dir();
  json line = {{"messages", fx["chats"][0]["messages"]}};
  write_file(dir + "/chat.jsonl", line.dump() + "\n");
  PrepareDataOptions o = options(dir, dir + "/chat.jsonl", DataFormat::kSft);
  prepare_data(o);
  EXPECT_EQ(TokenFile(o.output).doc_tokens(0), fx["chats"][0]["ids"].get<std::vector<int32_t>>());
  o.chat_format = "llama3";
  prepare_data(o);
  EXPECT_EQ(TokenFile(o.output).doc_tokens(0), fx["chats"][0]["ids"].get<std::vector<int32_t>>());
  // A tokenizer without the Llama-3 header tokens cannot use the format.
  o.tokenizer = source_path(kGpt2);
  EXPECT_NE(error_of(o).find("has no '<|start_header_id|>' token"), std::string::npos);
}

TEST(PrepareData, OutputIndependentOfThreads) {
  const std::string dir = testing::temp_dir();
  const json fx = json::parse(read_file(source_path("tests/fixtures/tokenizer/expected.json")));
  std::string jsonl, sft;
  int i = 0;
  for (const auto& c : fx["cases"]) {
    if (c["tokenizer"] != "llama3") continue;
    jsonl += json{{"text", c["text"]}}.dump() + "\n";
    sft += json{{"prompt", "Q" + std::to_string(i++) + ": "}, {"completion", c["text"]}}.dump() + "\n";
  }
  write_file(dir + "/d.jsonl", jsonl);
  write_file(dir + "/s.jsonl", sft);
  for (auto [file, format] : {std::pair{"/d.jsonl", DataFormat::kJsonl}, std::pair{"/s.jsonl", DataFormat::kSft}}) {
    std::string reference;
    for (int threads : {1, 3, 8}) {
      PrepareDataOptions o = options(dir, dir + file, format);
      o.threads = threads;
      o.chunk_bytes = 300;  // many chunks, so the workers really interleave
      o.output = dir + "/out" + std::to_string(threads) + ".bin";
      const PrepareDataStats s = prepare_data(o);
      EXPECT_GT(s.documents, 100);
      const std::string bytes = read_file(o.output);
      if (reference.empty()) reference = bytes;
      EXPECT_EQ(bytes, reference) << file << " with " << threads << " threads";
    }
    // The chunk size only changes the work split, not the output.
    PrepareDataOptions o = options(dir, dir + file, format);
    o.output = dir + "/big_chunks.bin";
    prepare_data(o);
    EXPECT_EQ(read_file(o.output), reference);
  }
}

TEST(PrepareData, ErrorsNameFileAndLine) {
  const std::string dir = testing::temp_dir();
  const std::string in = dir + "/bad.jsonl";
  auto expect_error = [&](const std::string& content, DataFormat format, const std::string& text) {
    write_file(in, content);
    PrepareDataOptions o = options(dir, in, format);
    o.chunk_bytes = 16;
    const std::string err = error_of(o);
    EXPECT_NE(err.find(text), std::string::npos) << "message: " << err << "\nmissing: " << text;
  };
  expect_error("{\"text\": \"ok\"}\n{\"text\": \"ok\"}\n{\"text\": oops}\n{\"text\": 1}\n", DataFormat::kJsonl,
               in + ":3: not valid JSON");
  expect_error("{\"text\": \"ok\"}\n\n{\"txt\": \"x\"}\n", DataFormat::kJsonl,
               in + ":3: field 'text' is missing (--text-field text)");
  expect_error("{\"text\": [1]}\n", DataFormat::kJsonl, in + ":1: field 'text' must be a string, got an array");
  expect_error("[1, 2]\n", DataFormat::kJsonl, in + ":1: expected a JSON object, got an array");
  expect_error("{\"prompt\": \"p\"}\n", DataFormat::kSft, in + ":1: field 'completion' is missing");
  expect_error("{\"input\": \"p\"}\n", DataFormat::kSft, "needs 'prompt' and 'completion' strings, or 'messages'");
  expect_error("{\"messages\": [1]}\n", DataFormat::kSft, in + ":1: messages[0]: expected an object, got a number");
  expect_error("ok\n\nfine\n\nbad \xC3\x28 byte\n", DataFormat::kText, in + ":5: invalid UTF-8 at byte 5 of the text: byte 0x28 is not a continuation byte");

  // A failed run leaves a previous output untouched, and no temporary file.
  write_file(dir + "/tokens.bin", "previous");
  write_file(in, "{\"text\": \"a\"}\n{\"text\": 2}\n");
  error_of(options(dir, in, DataFormat::kJsonl));
  EXPECT_EQ(read_file(dir + "/tokens.bin"), "previous");
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) files += e.is_regular_file();
  EXPECT_EQ(files, 2);  // bad.jsonl and tokens.bin

  PrepareDataOptions o = options(dir, in, DataFormat::kJsonl, kGpt2);
  o.append_eos = true;
  EXPECT_NE(error_of(o).find("--append-eos: no EOS token: there is no tokenizer_config.json next to"),
            std::string::npos);
  o.eos_token = "</s>";
  EXPECT_NE(error_of(o).find("EOS token '</s>' is not in the vocabulary"), std::string::npos);
  o = options(dir, dir + "/missing.jsonl", DataFormat::kJsonl);
  EXPECT_NE(error_of(o).find("--input '" + dir + "/missing.jsonl': no such file"), std::string::npos);
  o = options(dir, in, DataFormat::kJsonl);
  o.output = in;
  EXPECT_NE(error_of(o).find("is also an --input"), std::string::npos);
  EXPECT_NE(error_of([&] {
              auto p = options(dir, in, DataFormat::kJsonl);
              p.chat_format = "mistral";
              return p;
            }())
                .find("--chat-format=mistral: not a built-in chat format (built in: llama3, chatml, qwen2.5"),
            std::string::npos);
  EXPECT_THROW(parse_data_format("csv", "--format"), InputError);
  EXPECT_EQ(guess_data_format({"a.jsonl", "b.json"}), DataFormat::kJsonl);
  EXPECT_EQ(guess_data_format({"a.txt", "b"}), DataFormat::kText);
  try {
    guess_data_format({"a.jsonl", "b.txt"});
    ADD_FAILURE() << "a mix of .jsonl and .txt inputs must be refused";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("--format auto: 1 of the 2 inputs end in .jsonl/.json"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(parse_text_unit("page", "--text-unit"), InputError);
}

TEST(PrepareData, CommandLine) {
  const std::string dir = testing::temp_dir();
  write_file(dir + "/a.jsonl", "{\"text\": \"hello there\"}\n{\"text\": \"general kenobi\"}\n");
  std::string out;
  const std::string cmd = testing::binary_path() + " prepare-data --tokenizer " + source_path(kLlama) + " --input " +
                          dir + "/a.jsonl --output " + dir + "/t.bin --threads 2 --append-eos";  // --format auto: jsonl
  ASSERT_EQ(testing::run_command(cmd, &out), 0) << out;
  EXPECT_NE(out.find("prepare-data: 2 documents,"), std::string::npos) << out;  // the progress line
  EXPECT_NE(out.find("MB/s"), std::string::npos) << out;
  TokenFile f(dir + "/t.bin");
  EXPECT_EQ(f.num_docs(), 2);
  const auto tok = Tokenizer::load(source_path(kLlama));
  EXPECT_EQ(tok->decode(f.doc_tokens(1)), "<|begin_of_text|>general kenobi<|end_of_text|>");

  write_file(dir + "/b.jsonl", "{\"text\": \"ok\"}\n{\"text\": 5}\n");
  const std::string bad = testing::binary_path() + " prepare-data --tokenizer " + source_path(kLlama) + " --input " +
                          dir + "/b.jsonl --output " + dir + "/u.bin --format jsonl --quiet";
  EXPECT_EQ(testing::run_command(bad, &out), 1);
  EXPECT_NE(out.find("seqpar: error: " + dir + "/b.jsonl:2: field 'text' must be a string, got a number"),
            std::string::npos)
      << out;
  EXPECT_FALSE(std::filesystem::exists(dir + "/u.bin"));
}

}  // namespace
}  // namespace seqpar
