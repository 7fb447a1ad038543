// prepare-data with Jinja chat templates (the tokenizer's own, --chat-template, --chat-template-name)
// against transformers: for every real template of tests/fixtures/chat_template/templates, the ids
// equal apply_chat_template(messages, tokenize=True) and the loss mask equals
// return_assistant_tokens_mask (templates with {% generation %}) or the assistant-turn rule of
// data/chat_template.h, on the fixture tokenizer (tools/make_chat_template_fixtures.py writes both).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/prepare_data.h"
#include "data/token_file.h"
#include "io/tokenizer.h"
#include "test_util.h"

namespace seqpar {
namespace {

using nlohmann::ordered_json;
using testing::read_file;
using testing::source_path;
using testing::write_file;

const std::string kFixtures = "tests/fixtures/chat_template/";
// tools/make_chat_template_fixtures.py pins strftime_now() to this time.
const char* kNow = "2025-01-15T10:30:00";

ordered_json chats_fixture() { return ordered_json::parse(read_file(source_path(kFixtures + "chats.json"))); }

std::string template_text(const std::string& name) {
  return read_file(source_path(kFixtures + "templates/" + name + ".jinja"));
}

// A tokenizer directory: the fixture tokenizer.json and a tokenizer_config.json of `config`.
std::string tokenizer_dir(const ordered_json& config) {
  const std::string dir = testing::temp_dir() + "/tok";
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(source_path(kFixtures + "tokenizer.json"), dir + "/tokenizer.json");
  write_file(dir + "/tokenizer_config.json", config.dump());
  return dir;
}

PrepareDataOptions sft_options(const std::string& tokenizer, const std::string& input) {
  PrepareDataOptions o;
  o.tokenizer = tokenizer;
  o.inputs = {input};
  o.output = input + ".bin";
  o.format = DataFormat::kSft;
  o.chat_template_now = kNow;
  o.threads = 2;
  o.progress = false;
  return o;
}

std::string error_of(const PrepareDataOptions& o) {
  try {
    prepare_data(o);
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

#define EXPECT_HAS(text, part) EXPECT_NE(std::string(text).find(part), std::string::npos) << (text)

// The assistant-turn rule, computed from the fixture independently of seqpar's renderer: each
// assistant turn's trained text (its content as the template writes it, and its end token; found
// in order in the rendered text) covers the tokens whose first byte lies in it.
std::vector<uint8_t> turn_rule_mask(const Tokenizer& tok, const ordered_json& chat) {
  const std::string text = chat["text"];
  std::vector<int64_t> starts;
  const std::vector<int32_t> ids = tok.encode(text, /*add_special_tokens=*/false, &starts);
  std::vector<uint8_t> mask(ids.size(), 0);
  size_t from = 0;
  for (const auto& turn : chat["trained"]) {
    const std::string t = turn;
    const size_t at = text.find(t, from);
    EXPECT_NE(at, std::string::npos) << "trained text not in the rendering: " << t;
    if (at == std::string::npos) break;
    for (size_t k = 0; k < ids.size(); ++k)
      if (starts[k] >= static_cast<int64_t>(at) && starts[k] < static_cast<int64_t>(at + t.size())) mask[k] = 1;
    from = at + t.size();
  }
  return mask;
}

// Every template, found in the tokenizer's tokenizer_config.json, through the whole prepare-data
// pipeline: the token file holds transformers' ids and mask.
TEST(PrepareDataJinja, TokenizerTemplatesMatchApplyChatTemplate) {
  const ordered_json fx = chats_fixture();
  const auto tok = Tokenizer::load(source_path(kFixtures + "tokenizer.json"));
  ASSERT_GE(fx.size(), 6u);
  for (const auto& [name, entry] : fx.items()) {
    SCOPED_TRACE(name);
    ordered_json config = ordered_json::object();
    for (const auto& [k, v] : entry["tokens"].items()) {
      // Special tokens as transformers saves them (AddedToken dicts) for half the templates.
      if (config.size() % 2 == 0) {
        config[k] = ordered_json{{"__type", "AddedToken"}, {"content", v}, {"lstrip", false}, {"special", true}};
      } else {
        config[k] = v;
      }
    }
    config["chat_template"] = template_text(name);
    const std::string dir = tokenizer_dir(config);
    std::string lines;
    std::vector<const ordered_json*> chats;
    for (const auto& [conv, c] : entry["chats"].items()) {
      if (c.contains("error")) continue;  // transformers raises for this conversation
      lines += ordered_json{{"messages", c["messages"]}}.dump() + "\n";
      chats.push_back(&c);
    }
    ASSERT_GE(chats.size(), 5u);
    write_file(dir + "/chats.jsonl", lines);
    const PrepareDataOptions o = sft_options(dir, dir + "/chats.jsonl");
    if (name == "mistral-nemo-instruct-2407") {
      // It writes the system message into the last user turn, so an earlier turn renders
      // differently once a later one follows: the rule of chat_template.h refuses it by name.
      EXPECT_HAS(error_of(o), "renders the conversation before messages[");
      continue;
    }
    try {
      prepare_data(o);
    } catch (const InputError& e) {
      ADD_FAILURE() << e.what();
      continue;
    }
    TokenFile f(o.output);
    ASSERT_TRUE(f.has_loss_mask());
    ASSERT_EQ(f.num_docs(), static_cast<int64_t>(chats.size()));
    for (size_t d = 0; d < chats.size(); ++d) {
      const ordered_json& c = *chats[d];
      SCOPED_TRACE(c["messages"].dump());
      const auto i = static_cast<int64_t>(d);
      EXPECT_EQ(f.doc_tokens(i), c["ids"].get<std::vector<int32_t>>());
      std::vector<uint8_t> mask(static_cast<size_t>(f.doc_end(i) - f.doc_begin(i)));
      f.read_loss_mask(f.doc_begin(i), f.doc_end(i), mask.data());
      const std::vector<uint8_t> want =
          entry["generation"].get<bool>() ? c["assistant_mask"].get<std::vector<uint8_t>>() : turn_rule_mask(*tok, c);
      EXPECT_EQ(mask, want);
      EXPECT_GT(std::count(mask.begin(), mask.end(), uint8_t{1}), 0);
    }
  }
}

// chat_template.jinja before tokenizer_config.json's; --chat-template before both; a named
// template of a list by --chat-template-name; --chat-format instead of the template.
TEST(PrepareDataJinja, TemplatePrecedence) {
  const ordered_json fx = chats_fixture();
  const ordered_json& llama = fx["llama-3.1-8b-instruct"];
  const ordered_json& chat = llama["chats"]["one_turn"];
  ordered_json config = llama["tokens"];
  config["chat_template"] = ordered_json::array(
      {{{"name", "default"}, {"template", template_text("llama-3.1-8b-instruct")}},
       {{"name", "plain"}, {"template", "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"}}});
  const std::string dir = tokenizer_dir(config);
  write_file(dir + "/chat.jsonl", ordered_json{{"messages", chat["messages"]}}.dump() + "\n");
  const auto tok = Tokenizer::load(dir + "/tokenizer.json");
  PrepareDataOptions o = sft_options(dir, dir + "/chat.jsonl");
  auto first_doc = [&] {
    prepare_data(o);
    return tok->decode(TokenFile(o.output).doc_tokens(0));
  };
  EXPECT_EQ(first_doc(), chat["text"].get<std::string>());  // the list's default
  o.chat_template_name = "plain";
  EXPECT_EQ(first_doc(), "user: What is 2+2?\nassistant: 2+2 = 4.\n");
  o.chat_template_name.reset();

  write_file(dir + "/chat_template.jinja", "J{{ messages[0].content }}");
  EXPECT_EQ(first_doc(), "JWhat is 2+2?");
  o.chat_template_name = "default";  // chat_template.jinja is the default
  EXPECT_EQ(first_doc(), "JWhat is 2+2?");
  o.chat_template_name.reset();

  write_file(dir + "/other.jinja", "F{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}");
  o.chat_template_file = dir + "/other.jinja";
  EXPECT_EQ(first_doc(), "F<|begin_of_text|>What is 2+2?2+2 = 4.");
  o.chat_template_file.reset();

  o.chat_format = "llama3";
  EXPECT_EQ(first_doc().rfind("<|begin_of_text|><|start_header_id|>user<|end_header_id|>", 0), 0u);
}

TEST(PrepareDataJinja, Errors) {
  const ordered_json fx = chats_fixture();
  const ordered_json& llama = fx["llama-3.1-8b-instruct"];
  ordered_json config = llama["tokens"];
  const std::string dir = tokenizer_dir(config);  // no chat template
  write_file(dir + "/chat.jsonl", ordered_json{{"messages", llama["chats"]["one_turn"]["messages"]}}.dump() + "\n");
  write_file(dir + "/pc.jsonl", R"({"prompt": "a", "completion": "b"})"
                                "\n");
  PrepareDataOptions o = sft_options(dir, dir + "/chat.jsonl");

  // No template anywhere: the tokenizer directory is named with the two flags.
  std::string err = error_of(o);
  EXPECT_HAS(err, "chat.jsonl:1: chat 'messages' need a chat template, and the tokenizer directory '" + dir +
                      "' has none (no chat_template.jinja, no chat_template in tokenizer_config.json); pass "
                      "--chat-template FILE");
  EXPECT_HAS(err, "--chat-format llama3|chatml|qwen2.5");
  EXPECT_EQ(error_of(sft_options(dir, dir + "/pc.jsonl")), "(no error)");  // prompt/completion need none

  // Both flags.
  write_file(dir + "/t.jinja", template_text("llama-3.1-8b-instruct"));
  o.chat_template_file = dir + "/t.jinja";
  o.chat_format = "llama3";
  EXPECT_HAS(error_of(o),
             "--chat-format=llama3 and --chat-template=" + dir + "/t.jinja both say how chat 'messages' are rendered");
  o.chat_format.reset();
  EXPECT_EQ(error_of(o), "(no error)");
  o.chat_template_name = "default";
  EXPECT_HAS(error_of(o),
             "--chat-template-name=default picks one of the tokenizer's named chat templates, and "
             "--chat-template replaces");
  o.chat_template_name.reset();

  // A template that does not parse: the file, line and column.
  write_file(dir + "/bad.jinja", "{% for m in messages %}\n{{ m.content }}\n{% if %}{% endfor %}");
  o.chat_template_file = dir + "/bad.jinja";
  err = error_of(o);
  EXPECT_HAS(err, "chat template " + dir + "/bad.jinja:3:");
  EXPECT_EQ(err.find("chat.jsonl"), std::string::npos) << err;  // refused before any record is read
  o.chat_template_file = dir + "/missing.jinja";
  EXPECT_HAS(error_of(o), dir + "/missing.jinja");

  // The tokenizer's own template that does not parse stops chat records only.
  o.chat_template_file.reset();
  config["chat_template"] = "{{ messages[0].content }\n";
  write_file(dir + "/tokenizer_config.json", config.dump());
  err = error_of(o);
  EXPECT_HAS(err, "chat.jsonl:1: chat template " + dir + "/tokenizer_config.json:1:");
  EXPECT_HAS(err, "pass --chat-template FILE or --chat-format");
  EXPECT_EQ(error_of(sft_options(dir, dir + "/pc.jsonl")), "(no error)");

  // An unknown name: the names there are listed.
  config["chat_template"] =
      ordered_json::array({{{"name", "default"}, {"template", "a"}}, {{"name", "tool_use"}, {"template", "b"}}});
  write_file(dir + "/tokenizer_config.json", config.dump());
  o.chat_template_name = "rag";
  EXPECT_HAS(error_of(o), "--chat-template-name=rag: the tokenizer directory '" + dir +
                              "' has no chat template of that name (it has 'default', 'tool_use')");
  config["chat_template"] = "a";
  write_file(dir + "/tokenizer_config.json", config.dump());
  EXPECT_HAS(error_of(o), "(it has no named templates)");
  // A bad entry of the list is named.
  config["chat_template"] = ordered_json::array({{{"name", "default"}}});
  write_file(dir + "/tokenizer_config.json", config.dump());
  o.chat_template_name.reset();
  EXPECT_HAS(error_of(o),
             "chat_template: each entry of the list must be an object with string 'name' and "
             "'template'");
  // A bad --chat-template-now.
  config["chat_template"] = "a";
  write_file(dir + "/tokenizer_config.json", config.dump());
  o.chat_template_now = "15 Jan 2025";
  EXPECT_HAS(error_of(o), "--chat-template-now=15 Jan 2025: expected a date YYYY-MM-DD");
  o.chat_template_now.reset();

  // A chat setting with a format that has no 'messages' would be read and not applied: refused.
  write_file(dir + "/text.jsonl", R"({"text": "hello"})"
                                  "\n");
  o.inputs = {dir + "/text.jsonl"};
  o.output = dir + "/text.bin";
  o.format = DataFormat::kJsonl;
  EXPECT_EQ(error_of(o), "(no error)");
  o.chat_template_file = dir + "/t.jinja";
  EXPECT_HAS(error_of(o), "--chat-template=" + dir +
                              "/t.jinja: a chat setting renders the 'messages' of SFT records, and --format is "
                              "jsonl; give --format sft");
  o.chat_template_file.reset();
  o.chat_format = "llama3";
  o.format = DataFormat::kText;
  EXPECT_HAS(error_of(o), "--chat-format=llama3: a chat setting renders the 'messages' of SFT records, and --format "
                          "is text");
}

// The command line: --chat-template FILE with a tokenizer that has no template of its own.
TEST(PrepareDataJinja, CommandLineChatTemplate) {
  const ordered_json fx = chats_fixture();
  const ordered_json& qwen = fx["qwen2.5-instruct"];
  const std::string dir = tokenizer_dir(qwen["tokens"]);
  std::string lines;
  for (const char* conv : {"one_turn", "system_multi_turn"})
    lines += ordered_json{{"messages", qwen["chats"][conv]["messages"]}}.dump() + "\n";
  write_file(dir + "/chat.jsonl", lines);
  const std::string tpl = source_path(kFixtures + "templates/qwen2.5-instruct.jinja");
  std::string out;
  const int rc = testing::run_command(testing::binary_path() + " prepare-data --tokenizer " + dir + " --input " + dir +
                                          "/chat.jsonl --output " + dir + "/out.bin --format sft " +
                                          "--chat-template " + tpl + " --chat-template-now 2025-01-15 2>&1",
                                      &out);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_HAS(out, "prepare-data: chat 'messages' rendered with the chat template " + tpl + " (--chat-template)");
  TokenFile f(dir + "/out.bin");
  ASSERT_EQ(f.num_docs(), 2);
  EXPECT_EQ(f.doc_tokens(0), qwen["chats"]["one_turn"]["ids"].get<std::vector<int32_t>>());
  EXPECT_EQ(f.doc_tokens(1), qwen["chats"]["system_multi_turn"]["ids"].get<std::vector<int32_t>>());

  // Both flags, on the command line.
  const int rc2 = testing::run_command(testing::binary_path() + " prepare-data --tokenizer " + dir + " --input " + dir +
                                           "/chat.jsonl --output " + dir + "/out2.bin --format sft " +
                                           "--chat-template " + tpl + " --chat-format chatml 2>&1",
                                       &out);
  EXPECT_NE(rc2, 0);
  EXPECT_HAS(out, "--chat-format=chatml and --chat-template=" + tpl);
  EXPECT_FALSE(std::filesystem::exists(dir + "/out2.bin"));
}

}  // namespace
}  // namespace seqpar
