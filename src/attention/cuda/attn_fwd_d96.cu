// Forward kernel instantiations, bf16 and f16, for head dim 96 (shapes listed in attn_dispatch.cpp). Its shared
// tiles are laid out in rows of 128 elements (attn_common.cuh, smem_width), so a D = 96 CTA uses the
// shared memory of a D = 128 one.
#include "attention/cuda/attn_fwd.cuh"

namespace seqpar::cuda_attn::detail {

template void run_fwd<Elem::kBf16, 96, 128, 64, 4, 1>(const FwdParams&, cudaStream_t);
template void run_fwd<Elem::kBf16, 96, 64, 64, 4, 3>(const FwdParams&, cudaStream_t);
template void run_fwd<Elem::kF16, 96, 128, 64, 4, 1>(const FwdParams&, cudaStream_t);
template void run_fwd<Elem::kF16, 96, 64, 64, 4, 3>(const FwdParams&, cudaStream_t);

}  // namespace seqpar::cuda_attn::detail
