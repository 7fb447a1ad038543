// Helpers shared by the tests: random tensors, relative errors, fixture paths.
#pragma once

#include <sys/types.h>

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error_base.h"
#include "core/tensor.h"

namespace seqpar::testing {

std::string source_path(const std::string& rel);  // SEQPAR_SOURCE_DIR / rel
std::string binary_path();                        // build/seqpar
std::string temp_dir();                           // fresh directory per call

// A loopback TCP port that was free a moment ago (bound to port 0, then closed).
int free_port();
// Starts `cmd` under /bin/sh, stdout and stderr to `log`, with RLIMIT_FSIZE = fsize_bytes when > 0;
// returns its pid.
pid_t start_command(const std::string& cmd, const std::string& log, uint64_t fsize_bytes = 0);
// The exit code of `pid` (128 + signal when killed); -1 after timeout_s (the process is then killed).
int wait_exit(pid_t pid, double timeout_s);

// Uniform in [lo, hi), deterministic from seed.
std::vector<float> random_vector(size_t n, uint64_t seed, float lo = -1.f, float hi = 1.f);
Tensor random_tensor(const Shape& shape, uint64_t seed, float lo = -1.f, float hi = 1.f);
// Uniform doubles in [lo, hi), deterministic from seed (finite-difference tests run in double).
std::vector<double> random_doubles(size_t n, uint64_t seed, double lo = -1.0, double hi = 1.0);

// ||a - b|| / ||b|| (b is the reference); 0 when both are zero.
double rel_error(const std::vector<float>& a, const std::vector<float>& b);
double rel_error(const Tensor& a, const Tensor& b);

// Runs a shell command, returns exit code; stdout+stderr captured into *output if given.
int run_command(const std::string& cmd, std::string* output = nullptr);

// The JSON objects among a command's output lines (the lines that start with '{').
std::vector<nlohmann::json> json_lines(const std::string& text);

// A whole file's bytes ("" when it cannot be read), and bytes written as a file's whole content.
std::string read_file(const std::string& path);
void write_file(const std::string& path, const std::string& bytes);

// Runs f and expects a seqpar::Error whose message holds every piece.
template <typename F>
void expect_error(F&& f, std::initializer_list<std::string_view> pieces) {
  try {
    f();
  } catch (const Error& e) {
    const std::string what = e.what();
    for (std::string_view piece : pieces)
      EXPECT_NE(what.find(piece), std::string::npos) << "missing \"" << piece << "\" in: " << what;
    return;
  }
  ADD_FAILURE() << "no seqpar::Error thrown";
}

}  // namespace seqpar::testing
