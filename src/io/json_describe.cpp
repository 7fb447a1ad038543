#include "io/json_describe.h"

namespace seqpar {

std::string describe_json(const nlohmann::json& j) {
  using nlohmann::json;
  std::string value = j.dump();
  if (value.size() > 60) value = value.substr(0, 57) + "...";
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

}  // namespace seqpar
