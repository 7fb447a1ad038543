// The model's ops, one dispatching entry each: the implementation is chosen by the tensors'
// device (CPU: src/kernels/cpu/<op>.{h,cpp}, f32, templated on the element type so tests can run
// them in double; CUDA: src/kernels/cuda/<op>.cu, bf16 or f16 storage with f32 accumulation).
//
// Glossary: T tokens (local shard), C hidden, H query heads, Hkv KV heads, D head dim, F MLP
// width, V vocab. Layouts are token-major: activations [T, C], heads [T, H, D].
//
// Gradient convention (docs/ARCHITECTURE.md, "Contracts worth knowing"): parameter gradients
// accumulate (+=), activation gradients are written (=). Each entry says which.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace seqpar {

// ---- embedding --------------------------------------------------------------------------
// out[t, :] = wte[ids[t], :]. ids i32 [T], wte [V, C], out [T, C]. An id outside [0, V) throws
// (the CPU at once; CUDA at the next check_device_errors, see below).
void embedding_forward(Tensor& out, const Tensor& ids, const Tensor& wte);
// dwte[ids[t], :] += dout[t, :]   (parameter gradient: +=)
void embedding_backward(Tensor& dwte, const Tensor& dout, const Tensor& ids);

// ---- RMSNorm ----------------------------------------------------------------------------
// out = inp * rstd * weight, rstd[t] = 1 / sqrt(mean(inp[t]^2) + eps). inp/out [T, C],
// weight [C], rstd f32 [T] (saved for backward). HF LlamaRMSNorm semantics.
void rmsnorm_forward(Tensor& out, Tensor& rstd, const Tensor& inp, const Tensor& weight, float eps);
// dinp = ... (=), dweight += sum_t dout * inp * rstd (+=). With accumulate, dinp += ... instead:
// the residual stream's gradient takes the norm's in the same pass, rounded once (dinp may then
// share memory with no other operand).
void rmsnorm_backward(Tensor& dinp, Tensor& dweight, const Tensor& dout, const Tensor& inp, const Tensor& weight,
                      const Tensor& rstd, bool accumulate = false);

// ---- LayerNorm (GPT-2) -------------------------------------------------------------------
// out = (inp - mean) * rstd * weight + bias, mean[t] = mean(inp[t]), rstd[t] = 1 / sqrt(var(inp[t]) + eps)
// (biased variance: torch.nn.LayerNorm). inp/out [T, C]; weight, bias [C] (model dtype); mean, rstd f32 [T]
// (saved for backward). out may not alias inp.
void layernorm_forward(Tensor& out, Tensor& mean, Tensor& rstd, const Tensor& inp, const Tensor& weight,
                       const Tensor& bias, float eps);
// dinp (=); dweight += sum_t dout * xhat, dbias += sum_t dout (parameter gradients, f32, +=, deterministic).
// dinp may be dout itself (in place); it may not overlap any other operand. With accumulate,
// dinp += ... (as rmsnorm_backward's), and dinp may not be dout.
void layernorm_backward(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout, const Tensor& inp,
                        const Tensor& weight, const Tensor& mean, const Tensor& rstd, bool accumulate = false);

// ---- RoPE -------------------------------------------------------------------------------
// HF "rotate_half" convention: for pair (i, i + D/2), angle = position_ids[t] * inv_freq[i],
//   y_i = x_i cos - x_{i+D/2} sin,  y_{i+D/2} = x_{i+D/2} cos + x_i sin.
// x [T, H, D] rotated in place; position_ids i32 [T] (global positions, restart per document);
// inv_freq f32 [D/2] (rope_inv_freq in arch/llama_config.h builds it from the config); cos and sin
// multiplied by scale (HF's attention_scaling: rope_attention_factor; 1 = exactly the plain rotation).
void rope_forward(Tensor& x, const Tensor& position_ids, const Tensor& inv_freq, float scale = 1.0f);
// The transpose of the (scaled) rotation (rotation by -angle, times scale), in place on dx (=).
void rope_backward(Tensor& dx, const Tensor& position_ids, const Tensor& inv_freq, float scale = 1.0f);

// ---- Qwen3's head norm, then RoPE ---------------------------------------------------------
// out [T, H, D] = rope(rmsnorm over each head's D of x [T, H, D], times weight [D]); rstd f32 [T * H], row t * H + h
// (for the backward). The values of rmsnorm_forward on the [T * H, D] rows followed by rope_forward; on CUDA one pass
// that rounds once (the pair through memory rounds twice). out may not overlap x.
void head_norm_rope_forward(Tensor& out, Tensor& rstd, const Tensor& x, const Tensor& weight, float eps,
                            const Tensor& position_ids, const Tensor& inv_freq, float scale = 1.0f);
// Its backward from dout, the rotated heads' gradient: dx (=; may be dout itself, in place), dweight += (f32 sums in
// a fixed order). rope_backward then rmsnorm_backward, on CUDA in one pass.
void head_norm_rope_backward(Tensor& dx, Tensor& dweight, const Tensor& dout, const Tensor& x, const Tensor& weight,
                             const Tensor& rstd, const Tensor& position_ids, const Tensor& inv_freq,
                             float scale = 1.0f);

// ---- SwiGLU -----------------------------------------------------------------------------
// out = silu(gate) * up; gate/up/out [T, F].
void swiglu_forward(Tensor& out, const Tensor& gate, const Tensor& up);
// dgate, dup (=); with out, also out = silu(gate) * up (=), bit for bit swiglu_forward's, for a backward that did
// not keep the forward's output. Each output may be any input's buffer (in place: each element's inputs are read
// before it is written); the outputs may not overlap one another.
void swiglu_backward(Tensor& dgate, Tensor& dup, const Tensor& dout, const Tensor& gate, const Tensor& up,
                     Tensor* out = nullptr);

// ---- GELU --------------------------------------------------------------------------------
// HF activation_function: "gelu" = erf form 0.5 x (1 + erf(x / sqrt 2)) (kErf); "gelu_new" and
// "gelu_pytorch_tanh" = tanh approximation 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (kTanh).
enum class GeluKind { kErf, kTanh };
// out = gelu(inp); inp/out same shape (e.g. [T, F]); out may alias inp (in place).
void gelu_forward(Tensor& out, const Tensor& inp, GeluKind kind);
// dinp = dout * gelu'(inp) (=); dinp may alias dout.
void gelu_backward(Tensor& dinp, const Tensor& dout, const Tensor& inp, GeluKind kind);

// ---- matmul -----------------------------------------------------------------------------
// out [M, N] = alpha * op(a) @ op(b) + beta * out, op(x) = x^T when trans_x. 2-D tensors (a
// [T, H, D] tensor is viewed as 2-D by the caller). A linear layer y = x W^T is
// matmul(y, x, W, false, true); dx = dy W is matmul(dx, dy, W, false, false);
// dW += dy^T x is matmul(dW, dy, x, true, false, 1, 1). With c (same shape and dtype as out, or
// out itself), out = alpha * op(a) @ op(b) + beta * c: a residual added without copying it first.
void matmul(Tensor& out, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, float alpha = 1.f,
            float beta = 0.f, const Tensor* c = nullptr);

// ---- linear layers, with what follows the product fused ----------------------------------
// A linear layer's GEMM and the elementwise step after it in one pass where the backend can (CUDA:
// cuBLASLt's epilogues, the bias, GELU and GELU' applied to the f32 product before it is rounded;
// where an epilogue does not apply, and on the CPU, matmul then the separate op, the same math).
// x [T, K], w [N, K] (y = x w^T), bias [N] in the activations' dtype.
//
// y [T, N] = x w^T + bias + residual (=); bias and residual may be null; residual [T, N] may be y
// itself (then y +=). Other operands may not overlap y.
void linear_forward(Tensor& y, const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor* residual = nullptr);
// pre [T, N] = x w^T + bias (bias may be null), h = gelu(pre) (=): the GPT MLP's up projection
// and its activation; pre is kept for the backward. CUDA fuses the GELU for kTanh only
// (cuBLASLt's GELU is the tanh form); kErf runs gelu_forward on pre.
void linear_gelu_forward(Tensor& h, Tensor& pre, const Tensor& x, const Tensor& w, const Tensor* bias, GeluKind kind);
// dpre [T, K] = (dy [T, N] @ w) * gelu'(pre [T, K]) (=): the input gradient of a linear layer whose
// input was gelu(pre), taken back through the GELU (the down projection's, into the up
// projection's output). dpre may not overlap the other operands.
void linear_backward_gelu(Tensor& dpre, const Tensor& dy, const Tensor& w, const Tensor& pre, GeluKind kind);

// ---- cross-entropy ----------------------------------------------------------------------
// Per-token loss on pre-shifted targets: losses[t] = logsumexp(logits[t]) - logits[t, targets[t]],
// and 0 where targets[t] == kIgnoreIndex. logits [T, V], targets i32 [T], losses f32 [T].
// A target outside [0, V) (and not -100) throws, naming the token and the value (CUDA: at
// check_device_errors). lse, when given (f32 [T]), keeps each row's logsumexp for the backward
// (0 for an ignored row).
inline constexpr int32_t kIgnoreIndex = -100;
void cross_entropy_forward(Tensor& losses, const Tensor& logits, const Tensor& targets, Tensor* lse = nullptr);
// dlogits[t] = (softmax(logits[t]) - onehot(targets[t])) * dloss, 0 for ignored rows (=).
// dloss is d(total loss)/d(losses[t]), the same for every token (1 / global good tokens).
// dlogits may be logits itself (in place). With the forward's lse of the same logits, the softmax
// is exp(logits - lse): one pass over the row instead of two.
void cross_entropy_backward(Tensor& dlogits, const Tensor& logits, const Tensor& targets, float dloss,
                            const Tensor* lse = nullptr);

// ---- elementwise ------------------------------------------------------------------------
void add_inplace(Tensor& y, const Tensor& x);  // y += x (same shape)
void scale_inplace(Tensor& y, float s);        // y *= s
// y[i] = std · N(0, 1), the draw of element offset + i of key `key` (kernels/normal_draw.h: a
// counter-based Box-Muller, so any range of a tensor can be filled apart, on any device, with the
// same values up to the last bit of libm's double math). y f32, bf16 or f16 (rounded to nearest even);
// offset even (a pair is one draw).
void normal_fill(Tensor& y, uint64_t key, float std, int64_t offset = 0);
// out = in converted between f32, bf16 and f16 (through f32, rounded once to nearest even), or
// copied when the dtypes match; same shape and device (e.g. f32 master weights -> bf16 or f16
// compute weights).
void cast(Tensor& out, const Tensor& in);
// Bias of a linear layer: y [T, N] += b [N] on every row (forward); db [N] += sum_t dy[t] (its
// gradient, a column sum, accumulated in f32 in a fixed order: deterministic). db is f32.
void bias_forward(Tensor& y, const Tensor& b);
void bias_backward(Tensor& db, const Tensor& dy);
// Sum of squares of all elements, accumulated in double (for the global grad norm).
double sum_squares(const Tensor& x);

// ---- bad input met on the device --------------------------------------------------------
// The embedding and cross-entropy kernels check ids and targets on the device without making
// the host wait: what they met is reported here, as the InputError the CPU path throws at once
// (the op, the token, the value, the rule). One host wait; nothing on the CPU. A training step
// calls it once, after its backward (train/step.cpp).
void check_device_errors(Device device);

// ---- AdamW ------------------------------------------------------------------------------
// torch.optim.AdamW semantics (decoupled weight decay, bias correction, eps outside the sqrt):
//   p *= 1 - lr * weight_decay
//   m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2       with g = grad * grad_scale
//   p -= lr * (m / (1 - beta1^step)) / (sqrt(v) / sqrt(1 - beta2^step) + eps)
// step is 1-based. param/m/v f32 (master weights); grad f32, bf16 or f16. grad_scale carries the
// clipping coefficient (1 when not clipping) times the inverse loss scale (fp16: train/loss_scaler.h).
struct AdamWConfig {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.01f;
};
void adamw_step(Tensor& param, Tensor& m, Tensor& v, const Tensor& grad, const AdamWConfig& cfg, int64_t step,
                float grad_scale);
// adamw_step on f32 gradients, then the updated params rounded into `rounded` (same shape, any
// float dtype, the same device): in the same pass (the parameters read once, on the CPU and on
// CUDA); the same bits as adamw_step followed by cast.
void adamw_step_rounded(Tensor& param, Tensor& m, Tensor& v, const Tensor& grad, Tensor& rounded,
                        const AdamWConfig& cfg, int64_t step, float grad_scale);

// torch.nn.utils.clip_grad_norm_'s coefficient: min(1, max_norm / (total_norm + 1e-6)).
// max_norm <= 0 means no clipping (coefficient 1).
float clip_coefficient(double total_norm, double max_norm);

// Threads each CPU GEMM may use (OpenBLAS). Ranks-as-threads set 1: several ranks each spinning
// up a BLAS thread pool oversubscribe the cores (measured: 1.8x slower at sp=4 on 2 cores).
void set_cpu_gemm_threads(int n);

}  // namespace seqpar
