#include "core/error.h"

namespace seqpar {

void throw_check_failure(const char* expr, const char* func, const char* file, int line,
                         const std::string& message) {
  std::string what = fmt::format("check failed: {} in {} at {}:{}", expr, func, file, line);
  if (!message.empty()) what += ": " + message;
  throw Error(what);
}

}  // namespace seqpar
