// Shared by the libFuzzer targets (tests/fuzz/, docs/fuzzing.md): a scratch file per process and
// the one rule every target checks. A parser may refuse an input only with an InputError; any
// other exception (a SEQPAR_CHECK's seqpar::Error, std::bad_alloc, a library's own exception), a
// crash, a leak, a sanitizer report or a timeout is a finding.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "core/error.h"

namespace seqpar::fuzz {

// A directory of this process's own under the temp dir (several fuzzers may run at once).
inline const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    auto d = std::filesystem::temp_directory_path() / ("seqpar_fuzz_" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

inline std::string write_scratch(const std::string& name, const uint8_t* data, size_t size) {
  const std::string path = (scratch_dir() / name).string();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  return path;
}

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// Runs f; an InputError is a correct refusal, everything else escapes to libFuzzer.
template <typename F>
void refuse_only_by_input_error(F&& f) {
  try {
    f();
  } catch (const InputError&) {
  }
}

}  // namespace seqpar::fuzz
