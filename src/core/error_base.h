// The error types and the one throwing function every check goes through. Free of fmt, so
// CUDA sources (nvcc) can include it.
#pragma once

#include <stdexcept>
#include <string>

namespace seqpar {

// Every seqpar failure is an Error; the CLI prints what() and exits non-zero.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A user-facing problem with input (a config value, a file, a flag): no source location,
// because the message itself names the setting, the value and the rule.
class InputError : public Error {
 public:
  using Error::Error;
};

[[noreturn]] void throw_check_failure(const char* expr, const char* func, const char* file, int line,
                                      const std::string& message);

}  // namespace seqpar

// SEQPAR_CHECK with a ready-made message string instead of a format (error.h), for sources that
// cannot include fmt (nvcc-compiled .cu files).
#define SEQPAR_CHECK_MSG(cond, message)                                                      \
  do {                                                                                       \
    if (!(cond)) [[unlikely]]                                                                \
      ::seqpar::throw_check_failure(#cond, __func__, __FILE__, __LINE__, std::string(message)); \
  } while (0)
