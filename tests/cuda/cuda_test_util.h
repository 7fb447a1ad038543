// Shared by the CUDA tests: whether device 0 is there and what it can run, and the op harness's
// CUDA backends (tests/ops/op_harness.h), each with the reason it cannot run on this machine.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "attention/attention_backend.h"
#include "attention/cuda/cudnn_sdpa.h"
#include "ops/op_harness.h"

namespace seqpar::testing {

inline bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

#define REQUIRE_GPU() \
  if (!::seqpar::testing::have_gpu()) GTEST_SKIP() << "no CUDA device"

// Device 0's compute capability as major * 10 + minor, 0 without a device.
inline int device0_cc() {
  if (!have_gpu()) return 0;
  int major = 0, minor = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0);
  return major * 10 + minor;
}

// "" when device 0 can run the sm_90 kernels, else why not.
inline std::string sm90_skip_reason() {
  if (!have_gpu()) return "no CUDA device";
  const int cc = device0_cc();
  if (cc != 90)
    return "device 0 has compute capability " + std::to_string(cc / 10) + "." + std::to_string(cc % 10) +
           "; the wgmma kernels need 9.0";
  return "";
}

#define REQUIRE_SM90() \
  if (const std::string why = ::seqpar::testing::sm90_skip_reason(); !why.empty()) GTEST_SKIP() << why

// The ops' CUDA backends: bf16 and f32 storage.
inline std::vector<optest::Backend> cuda_op_backends() {
  return {{"cuda-bf16", Device::cuda(0), DType::kBF16, {}, ""},
          {"cuda-f16", Device::cuda(0), DType::kF16, {}, ""},
          {"cuda-f32", Device::cuda(0), DType::kF32, {}, ""}};
}

// A flash backend that forces one kernel family in both directions, on bf16 (or, `compute` kF16,
// f16: an fp16 run's) q, k, v, dout and 16-bit outputs.
inline optest::Backend flash_backend(FlashKernel kernel, DType compute = DType::kBF16) {
  optest::Backend b{std::string("cuda-flash-") + flash_kernel_name(kernel) + (compute == DType::kF16 ? "-f16" : ""),
                    Device::cuda(0),
                    compute,
                    {},
                    ""};
  b.attention.fwd_kernel = b.attention.bwd_kernel = kernel;
  if (kernel == FlashKernel::kWgmma) b.unavailable = sm90_skip_reason();
  return b;
}

// The 16-bit types the flash kernels are instantiated for (every flash test runs both).
inline std::vector<DType> flash_dtypes() { return {DType::kBF16, DType::kF16}; }

// cuDNN through `backend` (kCudnn or kAuto), its graph of one document as `dense` says.
inline optest::Backend cudnn_backend(AttentionBackend backend, CudnnDense dense = CudnnDense::kOn) {
  optest::Backend b{
      std::string("cuda-") + attention_backend_name(backend) + (dense == CudnnDense::kOn ? "" : "-ragged"),
      Device::cuda(0),
      DType::kBF16,
      {},
      ""};
  b.attention.backend = backend;
  b.attention.cudnn_dense = dense;
  if (cuda_attn::cudnn_runtime_version() == 0) {
    b.unavailable = "built without cuDNN";
  } else if (backend == AttentionBackend::kAuto && device0_cc() < 90) {
    b.unavailable = "auto picks cuDNN from compute capability 9.0";
  }
  return b;
}

// cudnn_backend in fp16 (f16 q, k, v, out and gradients); auto routes f16 as it routes bf16.
inline optest::Backend cudnn_f16_backend(AttentionBackend backend, CudnnDense dense = CudnnDense::kOn) {
  optest::Backend b = cudnn_backend(backend, dense);
  b.name += "-f16";
  b.compute = DType::kF16;
  return b;
}

// Every CUDA attention path: mma.sync, wgmma (sm_90), cuDNN (dense and ragged graphs), auto; each
// in bf16 and in fp16.
inline std::vector<optest::Backend> cuda_attention_backends() {
  return {flash_backend(FlashKernel::kMma),
          flash_backend(FlashKernel::kWgmma),
          cudnn_backend(AttentionBackend::kCudnn),
          cudnn_backend(AttentionBackend::kCudnn, CudnnDense::kOff),
          cudnn_backend(AttentionBackend::kAuto),
          flash_backend(FlashKernel::kMma, DType::kF16),
          flash_backend(FlashKernel::kWgmma, DType::kF16),
          cudnn_f16_backend(AttentionBackend::kCudnn),
          cudnn_f16_backend(AttentionBackend::kCudnn, CudnnDense::kOff),
          cudnn_f16_backend(AttentionBackend::kAuto)};
}

}  // namespace seqpar::testing
