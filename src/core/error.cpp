#include "core/error.h"

namespace seqpar {

void throw_check_failure(const char* expr, const char* func, const char* file, int line,
                         const std::string& message) {
  std::string what = fmt::format("check failed: {} in {} at {}:{}", expr, func, file, line);
  if (!message.empty()) what += ": " + message;
  throw Error(what);
}

void Problems::add(std::string message) {
  for (const std::string& m : list_)
    if (m == message) return;  // the same problem reached by two paths is one problem
  list_.push_back(std::move(message));
}

void Problems::append(const Problems& other) {
  for (const std::string& m : other.list_) add(m);
}

void Problems::raise() const {
  if (list_.empty()) return;
  if (list_.size() == 1) throw InputError(list_.front());
  std::string what = fmt::format("{} problems in the configuration (all of them, found before any work):", list_.size());
  for (size_t i = 0; i < list_.size(); ++i) what += fmt::format("\n  {}. {}", i + 1, list_[i]);
  throw InputError(what);
}

}  // namespace seqpar
