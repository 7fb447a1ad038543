#include "cli/bench_util.h"

#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <sstream>

#include "core/error.h"

namespace seqpar {

std::vector<int64_t> parse_int_list(const std::string& value, const std::string& flag, bool allow_zero) {
  std::vector<int64_t> v;
  std::stringstream ss(value);
  std::string item;
  while (std::getline(ss, item, ',')) {
    int64_t x = 0;  // the whole item, in range (strtoll took leading spaces and clamped overflow)
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), x);
    SEQPAR_INPUT_CHECK(!item.empty() && ec == std::errc() && end == item.data() + item.size() &&
                           (x > 0 || (allow_zero && x == 0)),
                       "{}={}: '{}' is not a {} integer (comma-separated list expected)", flag, value, item,
                       allow_zero ? "non-negative" : "positive");
    v.push_back(x);
  }
  SEQPAR_INPUT_CHECK(!v.empty(), "{}={} names no value", flag, value);
  return v;
}

std::string utc_now(const char* format) {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char buf[64];
  std::strftime(buf, sizeof(buf), format, std::gmtime(&t));
  return buf;
}

JsonLines::JsonLines(const std::string& path) {
  if (path.empty()) return;
  file_.open(path, std::ios::app);
  SEQPAR_INPUT_CHECK(file_.good(), "--out={}: cannot open for writing", path);
}

void JsonLines::write(const nlohmann::json& line) {
  const std::string text = line.dump();
  std::printf("%s\n", text.c_str());
  std::fflush(stdout);
  if (file_.is_open()) file_ << text << "\n" << std::flush;
}

}  // namespace seqpar
