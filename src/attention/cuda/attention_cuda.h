// CUDA implementations of attention/attention.h's attn_forward / attn_backward / attn_merge, same
// signatures and contracts, for tensors on a CUDA device. attention/attention.cpp dispatches here.
#pragma once

#include "attention/attention.h"
#include "attention/attention_backend.h"

namespace seqpar::cuda_attn {

// args.policy (attention_policy.h) chooses the backend, the flash kernel family and tiles and
// cuDNN's graph; calls the chosen cuDNN path cannot express exactly run the flash kernel (logged
// at debug level), and *args.ran, when set, says which path ran. Forward and backward may take
// different paths: both produce and consume the same out / lse.
void attn_forward(Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v, const AttnArgs& args);
// dq, dk, dv stored as `mode` says (attention.h's GradMode). kWrite costs less: the flash kernel
// stores dk/dv without reading them and its dq pass writes; cuDNN writes into dq/dk/dv directly
// (no scratch, no add passes).
void attn_backward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout, const Tensor& q, const Tensor& k,
                   const Tensor& v, const Tensor& out, const Tensor& lse, const AttnArgs& args,
                   GradMode mode = GradMode::kAccumulate);
void attn_merge(Tensor& out_acc, Tensor& lse_acc, const Tensor& out_part, const Tensor& lse_part);
void prepare_token_meta(const TokenMeta& meta, Device device);

}  // namespace seqpar::cuda_attn
