#include "data/chat_template.h"

#include <cstdio>

#include "core/error.h"

namespace seqpar {

namespace {

using jinja::Value;
using nlohmann::ordered_json;

// transformers' message preparation: keys whose value is None are dropped
// (_normalize_chat_messages), and the reasoning is aliased (_alias_reasoning_fields): a message
// with reasoning_content, thinking or reasoning gets `thinking` (in front, unless it is there) and
// `reasoning_content` (at the end, unless it is there), both the first of them that is set.
jinja::List prepare_messages(const ordered_json& messages) {
  SEQPAR_INPUT_CHECK(messages.is_array(), "'messages' must be an array");
  jinja::List out;
  for (size_t i = 0; i < messages.size(); ++i) {
    const ordered_json& m = messages[i];
    SEQPAR_INPUT_CHECK(m.is_object(), "messages[{}]: expected an object, got {}", i, m.type_name());
    ordered_json clean = ordered_json::object();
    for (const auto& [k, v] : m.items())
      if (!v.is_null()) clean[k] = v;
    const ordered_json* reasoning = nullptr;
    for (const char* key : {"reasoning_content", "thinking", "reasoning"})
      if (!reasoning && clean.contains(key)) reasoning = &clean[key];
    if (reasoning) {
      const ordered_json r = *reasoning;
      ordered_json aliased = ordered_json::object();
      if (!clean.contains("thinking")) aliased["thinking"] = r;
      for (const auto& [k, v] : clean.items()) aliased[k] = k == "thinking" || k == "reasoning_content" ? r : v;
      if (!clean.contains("reasoning_content")) aliased["reasoning_content"] = r;
      clean = std::move(aliased);
    }
    out.push_back(Value::from_json(clean));
  }
  return out;
}

}  // namespace

ChatTemplate::ChatTemplate(std::string_view source, std::string name,
                           std::vector<std::pair<std::string, std::string>> special_tokens, const std::tm& now)
    : template_(source, std::move(name)), special_tokens_(std::move(special_tokens)) {
  options_.now = now;
}

namespace {

jinja::Dict variables(const jinja::List& msgs, size_t count, bool add_generation_prompt,
                      const std::vector<std::pair<std::string, std::string>>& special_tokens) {
  jinja::Dict v;
  for (const auto& [k, t] : special_tokens) v.set(Value::string(k), Value::string(t));
  v.set(Value::string("messages"),
        Value::list(jinja::List(msgs.begin(), msgs.begin() + static_cast<std::ptrdiff_t>(count))));
  v.set(Value::string("tools"), Value::none());
  v.set(Value::string("documents"), Value::none());
  v.set(Value::string("add_generation_prompt"), Value::boolean(add_generation_prompt));
  return v;
}

}  // namespace

std::string ChatTemplate::render_text(const ordered_json& messages, bool add_generation_prompt) const {
  const jinja::List msgs = prepare_messages(messages);
  return template_.render(variables(msgs, msgs.size(), add_generation_prompt, special_tokens_), options_).text;
}

RenderedChat ChatTemplate::render(const ordered_json& messages) const {
  const jinja::List msgs = prepare_messages(messages);
  jinja::RenderResult full = template_.render(variables(msgs, msgs.size(), false, special_tokens_), options_);
  RenderedChat r;
  r.text = std::move(full.text);
  if (template_.has_generation_blocks()) {
    for (auto [b, e] : full.generation)
      if (e > b) r.trained.emplace_back(b, e);
    return r;
  }
  for (size_t k = 0; k < msgs.size(); ++k) {
    const Value* role = msgs[k].dict().find("role");
    if (!role || !role->is_string() || role->str() != "assistant") continue;
    std::string before, through;
    try {
      before = template_.render(variables(msgs, k, true, special_tokens_), options_).text;
      through = template_.render(variables(msgs, k + 1, false, special_tokens_), options_).text;
    } catch (const InputError& e) {
      throw InputError(
          fmt::format("locating the assistant turn messages[{}] (rendering the first {} and {} "
                      "messages): {}",
                      k, k, k + 1, e.what()));
    }
    SEQPAR_INPUT_CHECK(
        through.compare(0, before.size(), before) == 0 && r.text.compare(0, through.size(), through) == 0,
        "the chat template {} renders the conversation before messages[{}] differently once that assistant turn "
        "(or a later one) follows, so the assistant turns cannot be located by rendering prefixes; use a template "
        "with {{% generation %}} blocks around the assistant turns, or a built-in --chat-format",
        template_.name(), k);
    const size_t end =
        before.size() + jinja::py_strip(std::string_view(through).substr(before.size()), false, true).size();
    if (end > before.size()) r.trained.emplace_back(before.size(), end);
  }
  return r;
}

std::tm parse_template_time(const std::string& text, const std::string& setting) {
  std::tm t{};
  int y = 0, mo = 0, d = 0, h = 0, mi = 0, s = 0;
  char tail = 0;
  const int n = std::sscanf(text.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%c", &y, &mo, &d, &h, &mi, &s, &tail);
  const bool date_only = n == 3 && text.size() == 10;
  SEQPAR_INPUT_CHECK((date_only || (n == 6 && text.size() == 19)) && mo >= 1 && mo <= 12 && d >= 1 && d <= 31 &&
                         h >= 0 && h < 24 && mi >= 0 && mi < 60 && s >= 0 && s < 61,
                     "{}={}: expected a date YYYY-MM-DD or a time YYYY-MM-DDTHH:MM:SS", setting, text);
  t.tm_year = y - 1900;
  t.tm_mon = mo - 1;
  t.tm_mday = d;
  t.tm_hour = h;
  t.tm_min = mi;
  t.tm_sec = s;
  t.tm_isdst = -1;
  std::tm check = t;
  SEQPAR_INPUT_CHECK(timegm(&check) != -1 && check.tm_mday == d, "{}={}: not a date of the calendar", setting, text);
  t.tm_wday = check.tm_wday;  // timegm normalized it and computed the weekday and day of the year
  t.tm_yday = check.tm_yday;
  return t;
}

}  // namespace seqpar
