// Tensor maps for the Hopper attention kernels' bulk tensor copies (TMA), shared by the forward
// (attn_fwd_sm90.cu) and the backward (attn_bwd_sm90.cu). The driver's cuTensorMapEncodeTiled is
// reached through the runtime's entry-point query, so nothing links libcuda directly.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "attention/cuda/attn_launch.h"  // Elem

namespace seqpar::cuda_attn {

// A token-major 16-bit tensor [T, heads, D] of `elem` (the map's data type: bf16 or f16) as a 3-D map (innermost first:
// D, heads, T), read in boxes of 64 columns x 1 head x `rows` tokens into 128-byte-swizzled shared memory; rows past T
// arrive as zeros. `name` is for the error message.
CUtensorMap token_tensor_map(const uint16_t* ptr, Elem elem, int64_t T, int heads, int D, int rows, const char* name);
// An f32 tensor [T, heads, D] likewise, in boxes of 32 columns (128 bytes) x 1 head x `rows` tokens of 128-byte-swizzled
// shared memory, for bulk tensor reductions into it (rows past T are not written).
CUtensorMap f32_token_tensor_map(float* ptr, int64_t T, int heads, int D, int rows, const char* name);

}  // namespace seqpar::cuda_attn
