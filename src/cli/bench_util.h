// What the `seqpar bench` subcommands share: comma-separated integer options, the date stamp of
// their JSON lines, and the JSON-line sink (stdout, and a file with --out).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace seqpar {

// "8192,32768" -> {8192, 32768}; InputError naming `flag`, the value and the bad item otherwise.
// Items must be positive, or >= 0 with allow_zero.
std::vector<int64_t> parse_int_list(const std::string& value, const std::string& flag, bool allow_zero = false);

// The current UTC time formatted by strftime (e.g. "%Y-%m-%d").
std::string utc_now(const char* format);

// Each line goes to stdout (flushed) and, when a path is given, is appended to that file (every
// bench command and peer script appends, so several runs can share one results file).
class JsonLines {
 public:
  explicit JsonLines(const std::string& path);
  void write(const nlohmann::json& line);

 private:
  std::ofstream file_;
};

}  // namespace seqpar
