// A tokenizer's Jinja chat template (tokenizer_config.json's chat_template) applied to SFT chat
// records, as transformers' apply_chat_template(messages, tokenize=False) renders them, and the
// spans of the text that are trained (the assistant turns). docs/prepare-data.md has the rules.
//
// The loss mask:
//   - a template with {% generation %} blocks: exactly the text those blocks render (what
//     apply_chat_template(..., return_assistant_tokens_mask=True) marks);
//   - otherwise, for each assistant message k, the text that message's turn adds: from the end of
//     render(messages[:k], add_generation_prompt=True) (the conversation so far and the assistant
//     header) to the end of render(messages[:k+1]), without the whitespace at its end. So the
//     content and the turn's end token (<|eot_id|>, <|im_end|>, <end_of_turn>, </s>) are trained,
//     and the header and the newline after the end token are not, as the built-in formats do.
//     Each render must be a prefix of the next and of the whole conversation's; a template that
//     renders earlier turns differently once later turns exist is refused by name.
#pragma once

#include <ctime>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/jinja.h"
#include "data/prepare_data.h"

namespace seqpar {

class ChatTemplate {
 public:
  // `source`: the template text; `name`: where it came from (for messages); `special_tokens`: the
  // variables transformers passes from special_tokens_map (bos_token, eos_token, ...); `now`:
  // what strftime_now() formats.
  ChatTemplate(std::string_view source, std::string name,
               std::vector<std::pair<std::string, std::string>> special_tokens, const std::tm& now);

  // The text transformers' apply_chat_template renders for `messages` (a JSON array of message
  // objects, key order kept), with tools and documents none.
  std::string render_text(const nlohmann::ordered_json& messages, bool add_generation_prompt) const;
  // The text with add_generation_prompt false and its trained spans (the rule above).
  RenderedChat render(const nlohmann::ordered_json& messages) const;

  bool has_generation_blocks() const { return template_.has_generation_blocks(); }

 private:
  jinja::RenderResult run(const nlohmann::ordered_json& messages, size_t count, bool add_generation_prompt) const;

  jinja::Template template_;
  std::vector<std::pair<std::string, std::string>> special_tokens_;
  jinja::RenderOptions options_;
};

// "2024-07-26" or "2024-07-26T13:45:00" -> the time strftime_now() formats; InputError naming
// `setting` otherwise.
std::tm parse_template_time(const std::string& text, const std::string& setting);

}  // namespace seqpar
