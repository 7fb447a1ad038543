// Forward kernel instantiations for head dim 128 (shapes listed in attn_dispatch.cpp).
#include "attention/cuda/attn_fwd.cuh"

namespace seqpar::cuda_attn::detail {

template void run_fwd<128, 128, 64, 4, 1>(const FwdParams&, cudaStream_t);
template void run_fwd<128, 128, 64, 8, 1>(const FwdParams&, cudaStream_t);
template void run_fwd<128, 64, 64, 4, 3>(const FwdParams&, cudaStream_t);
template void run_fwd<128, 128, 32, 4, 1>(const FwdParams&, cudaStream_t);
template void run_fwd<128, 128, 128, 8, 1>(const FwdParams&, cudaStream_t);

}  // namespace seqpar::cuda_attn::detail
