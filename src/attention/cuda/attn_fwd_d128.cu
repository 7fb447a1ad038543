// Forward kernel instantiations, bf16 and f16, for head dim 128 (shapes listed in attn_dispatch.cpp).
#include "attention/cuda/attn_fwd.cuh"

namespace seqpar::cuda_attn::detail {

template void run_fwd<Elem::kBf16, 128, 128, 64, 4, 1>(const FwdParams&, cudaStream_t);
template void run_fwd<Elem::kBf16, 128, 128, 64, 8, 1>(const FwdParams&, cudaStream_t);
template void run_fwd<Elem::kBf16, 128, 64, 64, 4, 3>(const FwdParams&, cudaStream_t);
template void run_fwd<Elem::kBf16, 128, 128, 32, 4, 1>(const FwdParams&, cudaStream_t);
template void run_fwd<Elem::kBf16, 128, 128, 128, 8, 1>(const FwdParams&, cudaStream_t);
template void run_fwd<Elem::kF16, 128, 128, 64, 4, 1>(const FwdParams&, cudaStream_t);
template void run_fwd<Elem::kF16, 128, 128, 64, 8, 1>(const FwdParams&, cudaStream_t);
template void run_fwd<Elem::kF16, 128, 64, 64, 4, 3>(const FwdParams&, cudaStream_t);
template void run_fwd<Elem::kF16, 128, 128, 32, 4, 1>(const FwdParams&, cudaStream_t);
template void run_fwd<Elem::kF16, 128, 128, 128, 8, 1>(const FwdParams&, cudaStream_t);

}  // namespace seqpar::cuda_attn::detail
