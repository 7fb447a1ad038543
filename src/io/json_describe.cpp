#include "io/json_describe.h"

namespace seqpar {

namespace {

constexpr size_t kMaxChars = 60;
constexpr int kMaxLevels = 4;

// Appends a rendering of j to out, stopping once out holds more than kMaxChars characters and
// writing nested values below kMaxLevels as "[...]" / "{...}". Unlike json::dump() it never recurses
// deeper than kMaxLevels, whatever the value, and never renders a large value whole.
void render(const nlohmann::json& j, int level, std::string& out) {
  if (out.size() > kMaxChars) return;
  if (j.is_array() || j.is_object()) {
    const bool array = j.is_array();
    if (level >= kMaxLevels && !j.empty()) {
      out += array ? "[...]" : "{...}";
      return;
    }
    out += array ? '[' : '{';
    bool first = true;
    for (auto it = j.begin(); it != j.end() && out.size() <= kMaxChars; ++it) {
      if (!first) out += ',';
      first = false;
      if (!array) out += nlohmann::json(it.key()).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + ":";
      render(*it, level + 1, out);
    }
    out += array ? ']' : '}';
    return;
  }
  std::string scalar = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (scalar.size() > kMaxChars + 1) scalar.resize(kMaxChars + 1);  // truncated below
  out += scalar;
}

}  // namespace

std::string describe_json(const nlohmann::json& j) {
  using nlohmann::json;
  std::string value;
  render(j, 0, value);
  if (value.size() > kMaxChars) value = value.substr(0, kMaxChars - 3) + "...";
  switch (j.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::boolean:
      return "boolean " + value;
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
      return "integer " + value;
    case json::value_t::number_float:
      return "float " + value;
    case json::value_t::string:
      return "string " + value;
    case json::value_t::array:
      return "list " + value;
    case json::value_t::object:
      return "object " + value;
    default:
      return value;
  }
}

std::string short_json(const nlohmann::json& j) {
  std::string value;
  render(j, 0, value);
  if (value.size() > kMaxChars) value = value.substr(0, kMaxChars - 3) + "...";
  return value;
}

}  // namespace seqpar
