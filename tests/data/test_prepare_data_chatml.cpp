// Qwen's ChatML chat data in prepare-data (--chat-format chatml / qwen2.5) against transformers'
// apply_chat_template on a Qwen2-style tokenizer (tests/fixtures/tokenizer/gen_qwen2.py): the same
// text and ids, and the loss on the assistant turns only.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

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

const std::string kDir = "tests/fixtures/tokenizer/qwen2/";

std::vector<ChatMessage> messages_of(const json& j) {
  std::vector<ChatMessage> out;
  for (const json& m : j) out.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
  return out;
}

// What the loss may see: every assistant turn's content and its <|im_end|>, in order.
std::string assistant_text(const std::vector<ChatMessage>& msgs) {
  std::string out;
  for (const ChatMessage& m : msgs)
    if (m.role == "assistant") out += m.content + "<|im_end|>";
  return out;
}

TEST(PrepareDataChatml, RenderingAndIdsEqualApplyChatTemplate) {
  const json fx = json::parse(read_file(source_path(kDir + "expected.json")));
  const auto tok = Tokenizer::load(source_path(kDir + "tokenizer.json"));
  ASSERT_GE(fx["chats"].size(), 3u);
  for (const json& c : fx["chats"]) {
    const std::vector<ChatMessage> msgs = messages_of(c["messages"]);
    for (const char* format : {"chatml", "qwen2.5"}) {
      SCOPED_TRACE(format);
      const RenderedChat r = render_chat_chatml(msgs, std::string(format) == "qwen2.5" ? kQwen25DefaultSystem : "");
      EXPECT_EQ(r.text, c[format]["text"].get<std::string>());
      const TokenizedDoc d = tokenize_chat(*tok, r, /*eos=*/-1);
      EXPECT_EQ(d.tokens, c[format]["ids"].get<std::vector<int32_t>>());
      std::vector<int32_t> trained;
      for (size_t k = 0; k < d.tokens.size(); ++k)
        if (d.mask[k]) trained.push_back(d.tokens[k]);
      // A token that straddles a header and the content starts in the header and is masked (the
      // newline after "assistant" merges with content that begins with newlines): such content is
      // trained from the first token that starts in it (docs/prepare-data.md).
      const std::string want = assistant_text(msgs), got = tok->decode(trained);
      if (msgs.back().content.front() == '\n') {
        EXPECT_EQ(want.substr(want.size() - got.size()), got);
        EXPECT_LT(got.size(), want.size());
      } else {
        EXPECT_EQ(got, want);
      }
    }
  }
}

TEST(PrepareDataChatml, SftFileWithQwenFormat) {
  const json fx = json::parse(read_file(source_path(kDir + "expected.json")));
  const std::string dir = testing::temp_dir();
  std::string lines;
  for (const json& c : fx["chats"]) lines += json{{"messages", c["messages"]}}.dump() + "\n";
  write_file(dir + "/chat.jsonl", lines);
  PrepareDataOptions o;
  o.tokenizer = source_path(kDir + "tokenizer.json");
  o.inputs = {dir + "/chat.jsonl"};
  o.output = dir + "/chat.bin";
  o.format = DataFormat::kSft;
  o.chat_format = "qwen2.5";
  o.threads = 2;
  o.progress = false;
  prepare_data(o);
  TokenFile f(o.output);
  ASSERT_TRUE(f.has_loss_mask());
  ASSERT_EQ(f.num_docs(), static_cast<int64_t>(fx["chats"].size()));
  for (int64_t d = 0; d < f.num_docs(); ++d)
    EXPECT_EQ(f.doc_tokens(d), fx["chats"][static_cast<size_t>(d)]["qwen2.5"]["ids"].get<std::vector<int32_t>>());

  // Without --chat-format, the tokenizer_config.json's template (Qwen2.5-Instruct's, without tools)
  // renders the same ids, and the same trained tokens.
  const std::string qwen_bytes = read_file(o.output);
  o.chat_format.reset();
  prepare_data(o);
  EXPECT_EQ(read_file(o.output), qwen_bytes);
  // A role Qwen2.5's template renders with its own markup (tool) is refused by name; an unknown
  // format, and ChatML on a tokenizer without its tokens, too.
  write_file(dir + "/tool.jsonl", R"({"messages": [{"role": "tool", "content": "42"}]})"
                                  "\n");
  o.inputs = {dir + "/tool.jsonl"};
  o.chat_format = "qwen2.5";
  try {
    prepare_data(o);
    ADD_FAILURE() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("tool.jsonl:1: messages[0]: role 'tool' is not one --chat-format qwen2.5 "
                                         "renders"),
              std::string::npos)
        << e.what();
  }
  o.chat_format = "gemma";
  try {
    prepare_data(o);
    ADD_FAILURE() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("--chat-format=gemma: not a built-in chat format (built in: llama3, chatml, "
                                         "qwen2.5"),
              std::string::npos)
        << e.what();
  }
  o.chat_format = "chatml";
  o.tokenizer = source_path("tests/fixtures/tokenizer/llama3/tokenizer.json");
  try {
    prepare_data(o);
    ADD_FAILURE() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("has no '<|im_start|>' token: it is not a ChatML (Qwen) tokenizer"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace seqpar
