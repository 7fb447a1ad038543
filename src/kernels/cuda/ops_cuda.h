// CUDA implementations of the entries in kernels/ops.h, same signatures, for tensors on a CUDA
// device (bf16 or f32 activations, f32 accumulation). kernels/ops.cpp dispatches here by the
// tensors' device. Work is queued on the calling thread's current stream (core/cuda/stream.h).
#pragma once

#include "kernels/ops.h"

namespace seqpar::cuda_ops {

void embedding_forward(Tensor& out, const Tensor& ids, const Tensor& wte);
void embedding_backward(Tensor& dwte, const Tensor& dout, const Tensor& ids);
void rmsnorm_forward(Tensor& out, Tensor& rstd, const Tensor& inp, const Tensor& weight, float eps);
void rmsnorm_backward(Tensor& dinp, Tensor& dweight, const Tensor& dout, const Tensor& inp, const Tensor& weight,
                      const Tensor& rstd);
void rope_forward(Tensor& x, const Tensor& position_ids, const Tensor& inv_freq);
void rope_backward(Tensor& dx, const Tensor& position_ids, const Tensor& inv_freq);
void swiglu_forward(Tensor& out, const Tensor& gate, const Tensor& up);
void swiglu_backward(Tensor& dgate, Tensor& dup, const Tensor& dout, const Tensor& gate, const Tensor& up);
void matmul(Tensor& out, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, float alpha,
            float beta);
void cross_entropy_forward(Tensor& losses, const Tensor& logits, const Tensor& targets);
void cross_entropy_backward(Tensor& dlogits, const Tensor& logits, const Tensor& targets, float dloss);
void add_inplace(Tensor& y, const Tensor& x);
void scale_inplace(Tensor& y, float s);
double sum_squares(const Tensor& x);
void adamw_step(Tensor& param, Tensor& m, Tensor& v, const Tensor& grad, const AdamWConfig& cfg, int64_t step,
                float grad_scale);

// CUDA only (no CPU twin in ops.h): out = in converted between f32 and bf16 (round to nearest
// even), or copied when the dtypes match. Same shape, same device.
void cast(Tensor& out, const Tensor& in);

// matmul's cuBLASLt algorithm choice, per shape: the heuristic's first pick (default), or, once
// enabled, the fastest of its first 8 candidates, timed on the first call of each new shape (that
// call synchronises the stream and takes a scratch buffer of out's size from the pool).
void set_matmul_autotune(bool on);

}  // namespace seqpar::cuda_ops
