// How config readers name a JSON value in an error message: its type and (shortened) text, e.g.
// `string "16"` or `list [1,2]`.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace seqpar {

std::string describe_json(const nlohmann::json& j);

}  // namespace seqpar
