// Errors and checks. One family: every check names the failing statement, function, file, line.
// Shape and argument checks stay on in release builds.
// .cu files (nvcc) must not include this header (fmt 9 does not compile under nvcc in C++20):
// they include core/error_base.h and core/cuda_check.h only, and keep to kernels and launchers;
// the Tensor-level entry with its checks lives in a .cpp beside them.
#pragma once

#include <fmt/format.h>

#include <string>
#include <vector>

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

namespace seqpar {

// Every problem of one input found in one pass: the checks add to it instead of throwing, and the
// caller raises them together, so a file with three mistakes takes one run to fix, not three.
class Problems {
 public:
  void add(std::string message);
  // Runs f; an InputError it throws becomes one problem (the rest of f is skipped).
  template <typename F>
  void attempt(F&& f) {
    try {
      f();
    } catch (const InputError& e) {
      add(e.what());
    }
  }
  void append(const Problems& other);
  bool empty() const { return list_.empty(); }
  const std::vector<std::string>& list() const { return list_; }
  std::vector<std::string>& list() { return list_; }
  // One InputError naming every problem (its message alone when there is one); nothing when none.
  void raise() const;

 private:
  std::vector<std::string> list_;
};

}  // namespace seqpar

// SEQPAR_PROBLEM_CHECK(problems, cond, "setting=value must ..."): adds the message when cond fails.
#define SEQPAR_PROBLEM_CHECK(problems, cond, ...) \
  do {                                            \
    if (!(cond)) [[unlikely]]                     \
      (problems).add(::seqpar::detail::check_message(__VA_ARGS__)); \
  } while (0)
