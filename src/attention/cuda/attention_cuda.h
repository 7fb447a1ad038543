// CUDA implementations of attention/attention.h's attn_forward / attn_backward / attn_merge, same
// signatures and contracts, for tensors on a CUDA device. attention/attention.cpp dispatches here.
#pragma once

#include <string>

#include "attention/attention.h"
#include "attention/attention_backend.h"

namespace seqpar::cuda_attn {

// The process-wide attention backend for CUDA tensors (attention/attention_backend.h): "flash"
// (the default), "cudnn" or "auto". attn_forward / attn_backward consult it on every call; calls
// the chosen cuDNN path cannot express exactly run the flash kernel (logged at debug level).
// Forward and backward may take different paths: both produce and consume the same out / lse.
void set_attention_backend(AttentionBackend backend);
void set_attention_backend(const std::string& name);  // InputError for an unknown name
AttentionBackend attention_backend();

// Sets the backend for a scope (a run, a benchmark) and restores the previous one on the way out.
class AttentionBackendScope {
 public:
  explicit AttentionBackendScope(AttentionBackend backend) : prev_(attention_backend()) {
    set_attention_backend(backend);
  }
  ~AttentionBackendScope() { set_attention_backend(prev_); }
  AttentionBackendScope(const AttentionBackendScope&) = delete;
  AttentionBackendScope& operator=(const AttentionBackendScope&) = delete;

 private:
  AttentionBackend prev_;
};

void attn_forward(Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v, const AttnArgs& args);
// dq, dk, dv stored as `mode` says (attention.h's GradMode). kWrite costs less: the flash kernel
// stores dk/dv without reading them and its dq pass writes; cuDNN writes into dq/dk/dv directly
// (no scratch, no add passes).
void attn_backward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout, const Tensor& q, const Tensor& k,
                   const Tensor& v, const Tensor& out, const Tensor& lse, const AttnArgs& args,
                   GradMode mode = GradMode::kAccumulate);
void attn_merge(Tensor& out_acc, Tensor& lse_acc, const Tensor& out_part, const Tensor& lse_part);

}  // namespace seqpar::cuda_attn
