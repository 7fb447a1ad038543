// One error-check family for CUDA runtime, cuBLAS(Lt), cuDNN and NCCL: each names the failing
// statement, function, file and line, and the library's own message.
#pragma once

#if defined(SEQPAR_WITH_CUDA)
#include <cuda_runtime.h>

#include "core/error_base.h"

#define SEQPAR_CUDA_CHECK(stmt)                                                                    \
  do {                                                                                             \
    cudaError_t _sp_err = (stmt);                                                                  \
    if (_sp_err != cudaSuccess) [[unlikely]]                                                       \
      ::seqpar::throw_check_failure(#stmt, __func__, __FILE__, __LINE__, cudaGetErrorString(_sp_err)); \
  } while (0)

// After every kernel launch: catches bad launch configurations at the launch site.
#define SEQPAR_LAUNCH_CHECK() SEQPAR_CUDA_CHECK(cudaGetLastError())

// For libraries whose status is an int-like enum with a name function (cuBLAS, cuDNN, NCCL).
#define SEQPAR_LIB_CHECK(stmt, ok_value, name_fn)                                                  \
  do {                                                                                             \
    auto _sp_st = (stmt);                                                                          \
    if (_sp_st != (ok_value)) [[unlikely]]                                                         \
      ::seqpar::throw_check_failure(#stmt, __func__, __FILE__, __LINE__, name_fn(_sp_st));         \
  } while (0)
#endif
