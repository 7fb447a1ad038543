// Tensor maps for the Hopper attention kernels (attn_sm90_tma.h).
#include "attention/cuda/attn_sm90_tma.h"

#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <string>

#include "core/cuda_check.h"
#include "core/error.h"

namespace seqpar::cuda_attn {

namespace {

PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult status{};
    SEQPAR_CUDA_CHECK(
        cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &status));
    SEQPAR_CHECK(status == cudaDriverEntryPointSuccess && f != nullptr,
                 "the CUDA driver has no cuTensorMapEncodeTiled (driver 12.0 or newer is needed)");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

// A 3-D map over a token-major [T, heads, D] tensor of `bytes`-byte elements: boxes of `box_cols` columns (128
// bytes: the 128-byte swizzle's width) x 1 head x `rows` tokens.
CUtensorMap encode_token_map(void* ptr, CUtensorMapDataType type, int bytes, int box_cols, int64_t T, int heads, int D,
                             int rows, const char* name) {
  CUtensorMap m{};
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(D), static_cast<cuuint64_t>(heads),
                              static_cast<cuuint64_t>(T)};
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(D) * bytes, static_cast<cuuint64_t>(heads) * D * bytes};
  const cuuint32_t box[3] = {static_cast<cuuint32_t>(box_cols), 1, static_cast<cuuint32_t>(rows)};
  const cuuint32_t elem_strides[3] = {1, 1, 1};
  const CUresult r = tensor_map_encoder()(&m, type, 3, ptr, dims, strides, box, elem_strides,
                                          CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                          CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  SEQPAR_CHECK(r == CUDA_SUCCESS, "cuTensorMapEncodeTiled failed for {} [{}, {}, {}] ({}-byte elements, CUresult {})",
               name, T, heads, D, bytes, static_cast<int>(r));
  return m;
}

}  // namespace

CUtensorMap token_tensor_map(const uint16_t* ptr, Elem elem, int64_t T, int heads, int D, int rows, const char* name) {
  const CUtensorMapDataType type =
      elem == Elem::kF16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  return encode_token_map(const_cast<uint16_t*>(ptr), type, 2, 64, T, heads, D, rows, name);
}

CUtensorMap f32_token_tensor_map(float* ptr, int64_t T, int heads, int D, int rows, const char* name) {
  return encode_token_map(ptr, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, 32, T, heads, D, rows, name);
}

}  // namespace seqpar::cuda_attn
