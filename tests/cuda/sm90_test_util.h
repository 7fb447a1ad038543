// Shared by the Hopper (sm_90) attention kernel tests: skipping where the kernels cannot run, and
// an environment variable set for one scope (the kernel switches SEQPAR_FLASH_{FWD,BWD}_KERNEL), mask
// metadata from vectors.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "attention/attention.h"

namespace seqpar::testing {

// "" when device 0 can run the sm_90 kernels, else why not.
inline std::string sm90_skip_reason() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) return "no CUDA device";
  int major = 0, minor = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0);
  if (major != 9 || minor != 0)
    return "device 0 has compute capability " + std::to_string(major) + "." + std::to_string(minor) +
           "; the wgmma kernels need 9.0";
  return "";
}

#define REQUIRE_SM90()                                                                  \
  if (const std::string why = ::seqpar::testing::sm90_skip_reason(); !why.empty()) \
  GTEST_SKIP() << why

// Mask metadata of a token set from its per-token segments and positions (host tensors).
inline TokenMeta meta_of(const std::vector<int32_t>& seg, const std::vector<int32_t>& pos) {
  const int64_t n = static_cast<int64_t>(seg.size());
  return {Tensor::from_vector<int32_t>({n}, seg), Tensor::from_vector<int32_t>({n}, pos)};
}

// Sets an environment variable for one scope.
struct ScopedEnv {
  ScopedEnv(const char* name, const char* value) : name_(name) { setenv(name, value, 1); }
  ~ScopedEnv() { unsetenv(name_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
};

}  // namespace seqpar::testing
