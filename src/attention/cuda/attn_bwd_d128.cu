// Backward kernel instantiations, bf16 and f16, for head dim 128 (shapes listed in attn_dispatch.cpp).
#include "attention/cuda/attn_bwd.cuh"

namespace seqpar::cuda_attn::detail {

template void run_bwd_main<Elem::kBf16, 128, 64, 128, 8>(const BwdParams&, cudaStream_t);
template void run_bwd_main<Elem::kBf16, 128, 64, 64, 4>(const BwdParams&, cudaStream_t);
template void run_bwd_main<Elem::kF16, 128, 64, 128, 8>(const BwdParams&, cudaStream_t);
template void run_bwd_main<Elem::kF16, 128, 64, 64, 4>(const BwdParams&, cudaStream_t);

}  // namespace seqpar::cuda_attn::detail
