// Errors and checks. One family: every check names the failing statement, function, file, line.
// Shape and argument checks stay on in release builds.
// .cu files (nvcc) must not include this header (fmt 9 does not compile under nvcc in C++20):
// they include core/error_base.h and core/cuda_check.h only, and keep to kernels and launchers;
// the Tensor-level entry with its checks lives in a .cpp beside them.
#pragma once

#include <fmt/format.h>

#include "core/error_base.h"

// SEQPAR_CHECK(cond, "fmt {}", args...): throws seqpar::Error naming the statement and location.
#define SEQPAR_CHECK(cond, ...)                                                              \
  do {                                                                                       \
    if (!(cond)) [[unlikely]]                                                                \
      ::seqpar::throw_check_failure(#cond, __func__, __FILE__, __LINE__,                     \
                                    ::seqpar::detail::check_message(__VA_ARGS__));           \
  } while (0)

#define SEQPAR_CHECK_EQ(a, b, ...)                                                           \
  do {                                                                                       \
    const auto& _sp_a = (a);                                                                 \
    const auto& _sp_b = (b);                                                                 \
    if (!(_sp_a == _sp_b)) [[unlikely]]                                                      \
      ::seqpar::throw_check_failure(#a " == " #b, __func__, __FILE__, __LINE__,              \
                                    fmt::format("{} != {}. {}", _sp_a, _sp_b,                \
                                                ::seqpar::detail::check_message(__VA_ARGS__))); \
  } while (0)

// SEQPAR_INPUT_CHECK(cond, "setting=value must ..."): an InputError with exactly that message.
#define SEQPAR_INPUT_CHECK(cond, ...)                                                        \
  do {                                                                                       \
    if (!(cond)) [[unlikely]] throw ::seqpar::InputError(::seqpar::detail::check_message(__VA_ARGS__));          \
  } while (0)

namespace seqpar::detail {
inline std::string check_message() { return {}; }
template <typename... Args>
std::string check_message(fmt::format_string<Args...> f, Args&&... args) {
  return fmt::format(f, std::forward<Args>(args)...);
}
}  // namespace seqpar::detail
