// Backward kernel instantiations, bf16 and f16, for head dim 96 (shapes listed in attn_dispatch.cpp). Its shared
// tiles are laid out in rows of 128 elements (attn_common.cuh, smem_width). Only tiles whose dQ
// product gives each warp every head-dim column (BM = 16 * warps) split D = 96's 12 column chunks
// cleanly (attn_bwd.cuh's static_assert); of those, 128x128x8 spills registers (272 bytes, ptxas)
// and takes 226 KiB of shared memory, so 64x64x4 is the one instantiated.
#include "attention/cuda/attn_bwd.cuh"

namespace seqpar::cuda_attn::detail {

template void run_bwd_main<Elem::kBf16, 96, 64, 64, 4>(const BwdParams&, cudaStream_t);
template void run_bwd_main<Elem::kF16, 96, 64, 64, 4>(const BwdParams&, cudaStream_t);

}  // namespace seqpar::cuda_attn::detail
