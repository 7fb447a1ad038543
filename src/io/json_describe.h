// How config readers name a JSON value in an error message: its type and (shortened) text, e.g.
// `string "16"` or `list [1,2]`.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace seqpar {

std::string describe_json(const nlohmann::json& j);

// The (shortened) text alone, e.g. `[1,2]`: for messages that say the type themselves. Unlike
// json::dump() it is bounded in length and in recursion, whatever the value.
std::string short_json(const nlohmann::json& j);

}  // namespace seqpar
