#include "core/log.h"

#include <atomic>
#include <cstdio>
#include <mutex>

namespace seqpar {

namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};
std::mutex g_mutex;
}  // namespace

void set_log_level(LogLevel level) { g_level = static_cast<int>(level); }
LogLevel log_level() { return static_cast<LogLevel>(g_level.load()); }

void log_line(LogLevel level, const std::string& message) {
  static const char* kNames[] = {"debug", "info", "warn", "error"};
  std::lock_guard<std::mutex> lock(g_mutex);
  std::fprintf(stderr, "[seqpar %s] %s\n", kNames[static_cast<int>(level)], message.c_str());
}

}  // namespace seqpar
