// Forward kernel instantiations for head dim 64 (shapes listed in attn_dispatch.cpp).
#include "attention/cuda/attn_fwd.cuh"

namespace seqpar::cuda_attn::detail {

template void run_fwd<64, 128, 64, 4, 1>(const FwdParams&, cudaStream_t);
template void run_fwd<64, 64, 64, 4, 3>(const FwdParams&, cudaStream_t);
template void run_fwd<64, 128, 128, 8, 1>(const FwdParams&, cudaStream_t);
template void run_fwd<64, 256, 64, 8, 1>(const FwdParams&, cudaStream_t);

}  // namespace seqpar::cuda_attn::detail
