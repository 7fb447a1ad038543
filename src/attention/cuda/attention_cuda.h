// CUDA implementations of attention/attention.h's attn_forward / attn_backward / attn_merge, same
// signatures and contracts, for tensors on a CUDA device. attention/attention.cpp dispatches here.
#pragma once

#include "attention/attention.h"

namespace seqpar::cuda_attn {

void attn_forward(Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v, const AttnArgs& args);
void attn_backward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout, const Tensor& q, const Tensor& k,
                   const Tensor& v, const Tensor& out, const Tensor& lse, const AttnArgs& args);
void attn_merge(Tensor& out_acc, Tensor& lse_acc, const Tensor& out_part, const Tensor& lse_part);

}  // namespace seqpar::cuda_attn
