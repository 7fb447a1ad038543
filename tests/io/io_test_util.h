// Helpers for the io tests: the message of an expected InputError, raw file bytes.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <string>

#include "core/error.h"

namespace seqpar::testing {

// Runs f, which must throw InputError; returns its message ("" and a test failure otherwise).
template <typename F>
std::string input_error_of(F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected InputError, got another exception: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected InputError, nothing was thrown";
  return "";
}

// EXPECT_INPUT_ERROR(statement, "text the message must contain")
#define EXPECT_INPUT_ERROR(stmt, text)                                                               \
  do {                                                                                               \
    const std::string _msg = ::seqpar::testing::input_error_of([&] { (void)(stmt); });               \
    EXPECT_NE(_msg.find(text), std::string::npos) << "message: " << _msg << "\nmissing: " << (text); \
  } while (0)

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace seqpar::testing
