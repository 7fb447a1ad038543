// Raw-pointer launchers of the CUDA kernels in this folder (*.cu). No Tensor and no fmt: nvcc
// compiles the files that define them. ops_cuda.cpp checks shapes, dtypes and devices, then calls
// these. Every launcher queues its kernels on `stream` and checks each launch; none synchronises.
//
// Element types: "float" arguments (DType) are kF32, kBF16 or kF16; arithmetic is f32 throughout.
// `err` is a device int[3] error slot (common.cuh, report_error): kernels that validate indices
// set it instead of reading out of bounds, and the entry reads it back and throws.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>

#include "core/dtype.h"

namespace seqpar::cuda_kernels {

// Multiprocessors of the current device (cached per device).
int num_sms();

// out[t, :] = wte[ids[t], :]. out [T, C], wte [V, C], ids [T].
void embedding_forward(void* out, DType out_dt, const int32_t* ids, const void* wte, DType wte_dt, int64_t T,
                       int64_t C, int64_t V, int* err, cudaStream_t stream);
// dwte[ids[t], :] += dout[t, :], deterministic (see embedding.cu).
void embedding_backward(void* dwte, DType dwte_dt, const void* dout, DType dout_dt, const int32_t* ids, int64_t T,
                        int64_t C, int64_t V, int* err, cudaStream_t stream);

// out/inp [T, C] (x_dt), weight [C] (w_dt), rstd f32 [T].
void rmsnorm_forward(void* out, float* rstd, const void* inp, DType x_dt, const void* weight, DType w_dt, int64_t T,
                     int64_t C, float eps, cudaStream_t stream);
// Blocks of the first backward pass of RMSNorm and LayerNorm: `partials` must hold
// norm_backward_blocks(T) * C floats (RMSNorm; LayerNorm * 2 * C).
int norm_backward_blocks(int64_t T);
// dinp (=, or += with accumulate), dweight (+=, dw_dt). dinp/dout/inp share x_dt.
void rmsnorm_backward(void* dinp, void* dweight, DType dw_dt, float* partials, const void* dout, const void* inp,
                      DType x_dt, const void* weight, DType w_dt, const float* rstd, int64_t T, int64_t C,
                      bool accumulate, cudaStream_t stream);

// LayerNorm: out/inp [T, C] (x_dt), weight/bias [C] (w_dt), mean/rstd f32 [T].
void layernorm_forward(void* out, float* mean, float* rstd, const void* inp, DType x_dt, const void* weight,
                       const void* bias, DType w_dt, int64_t T, int64_t C, float eps, cudaStream_t stream);
// dinp (=, may be dout; or += with accumulate, not dout), dweight/dbias f32 (+=, deterministic).
// dinp/dout/inp share x_dt.
void layernorm_backward(void* dinp, float* dweight, float* dbias, float* partials, const void* dout, const void* inp,
                        DType x_dt, const void* weight, DType w_dt, const float* mean, const float* rstd, int64_t T,
                        int64_t C, bool accumulate, cudaStream_t stream);

// GELU on n elements of one dtype (tanh_approx: the tanh form, else erf); out may be inp, dinp dout.
void gelu_forward(void* out, const void* inp, DType dt, int64_t n, bool tanh_approx, cudaStream_t stream);
void gelu_backward(void* dinp, const void* dout, const void* inp, DType dt, int64_t n, bool tanh_approx,
                   cudaStream_t stream);

// x [T, H, D] rotated in place by +angle (inverse = false) or -angle (inverse = true).
void rope(void* x, DType dt, const int32_t* position_ids, const float* inv_freq, int64_t T, int64_t H, int64_t D,
          bool inverse, float scale, cudaStream_t stream);

// Qwen3's head norm then RoPE in one pass (head_norm_rope.cu): x/out/dx/dout [T, H, D] (x_dt), weight [D] (w_dt),
// rstd f32 [T * H], inv_freq f32 [D / 2]. Only where head_norm_rope_fused(D, every pointer) holds: D in {16, 32, 64,
// 128, 256} and 16-byte aligned pointers (ops_cuda.cpp runs rmsnorm_forward and rope elsewhere). The backward's
// `partials` hold head_norm_rope_backward_blocks(T, D) * D floats; dx may be dout; dweight += (dw_dt).
bool head_norm_rope_fused(int64_t D, std::initializer_list<const void*> pointers);
int head_norm_rope_backward_blocks(int64_t T, int64_t D);
void head_norm_rope_forward(void* out, float* rstd, const void* x, DType x_dt, const void* weight, DType w_dt,
                            const int32_t* position_ids, const float* inv_freq, int64_t T, int64_t H, int64_t D,
                            float eps, float scale, cudaStream_t stream);
void head_norm_rope_backward(void* dx, void* dweight, DType dw_dt, float* partials, const void* dout, const void* x,
                             DType x_dt, const void* weight, DType w_dt, const float* rstd,
                             const int32_t* position_ids, const float* inv_freq, int64_t T, int64_t H, int64_t D,
                             float scale, cudaStream_t stream);

// n elements each, one dtype.
void swiglu_forward(void* out, const void* gate, const void* up, DType dt, int64_t n, cudaStream_t stream);
void swiglu_backward(void* dgate, void* dup, const void* dout, const void* gate, const void* up, void* out, DType dt,
                     int64_t n, cudaStream_t stream);

// logits [T, V] (dt), targets [T], losses f32 [T], lse f32 [T] (the rows' logsumexp, 0 for an ignored
// row; written by the forward when not null, read by the backward when not null: then one pass).
// dlogits has the dtype of logits and may alias it.
void cross_entropy_forward(float* losses, float* lse, const void* logits, DType dt, const int32_t* targets, int64_t T,
                           int64_t V, int* err, cudaStream_t stream);
void cross_entropy_backward(void* dlogits, const void* logits, DType dt, const int32_t* targets, const float* lse,
                            float dloss, int64_t T, int64_t V, int* err, cudaStream_t stream);

// Elementwise over n elements.
void add_inplace(void* y, DType y_dt, const void* x, DType x_dt, int64_t n, cudaStream_t stream);
void scale_inplace(void* y, DType dt, float s, int64_t n, cudaStream_t stream);
void normal_fill(void* y, DType dt, uint64_t key, float std, int64_t offset, int64_t n, cudaStream_t stream);
// y [T, N] += b [N] per row.
void bias_forward(void* y, DType y_dt, const void* b, DType b_dt, int64_t T, int64_t N, cudaStream_t stream);
// db f32 [N] += column sums of dy [T, N]: partial sums of row blocks of kBiasRows rows into
// partials f32 [bias_row_blocks(T), N], then each column's partials added in block order.
inline constexpr int kBiasRows = 256;
inline int64_t bias_row_blocks(int64_t T) { return T == 0 ? 1 : (T + kBiasRows - 1) / kBiasRows; }
void bias_backward(float* db, const void* dy, DType dt, float* partials, int64_t T, int64_t N, cudaStream_t stream);
void cast(void* out, DType out_dt, const void* in, DType in_dt, int64_t n, cudaStream_t stream);
// Uniform in [lo, hi) from a counter-based hash of (seed, index): same values on any launch shape.
void fill_uniform(void* out, DType dt, int64_t n, uint64_t seed, float lo, float hi, cudaStream_t stream);

// Sum of squares in double, deterministic (fixed grid, fixed reduction order). `scratch` holds
// kSumSquaresBlocks + 1 doubles; the result lands in scratch[kSumSquaresBlocks].
inline constexpr int kSumSquaresBlocks = 1024;
void sum_squares(double* scratch, const void* x, DType dt, int64_t n, cudaStream_t stream);

// AdamW on n elements: param/m/v f32, grad (g_dt). The scalars are cpu::AdamWScalars's (computed
// in double the way torch does, rounded once to f32), so both backends see the same constants.
struct AdamWArgs {
  float decay;                  // 1 - lr * weight_decay
  float one_minus_beta1;        // lerp weight of m towards g
  float beta2;
  float one_minus_beta2;
  float neg_step_size;          // -lr / (1 - beta1^step)
  float bias_correction2_sqrt;  // sqrt(1 - beta2^step)
  float eps;
  float grad_scale;
};
// rounded (optional, r_dt): the updated params rounded into it in the same pass.
void adamw(float* param, float* m, float* v, const void* grad, DType g_dt, int64_t n, const AdamWArgs& args,
           cudaStream_t stream, void* rounded = nullptr, DType r_dt = DType::kF32);

}  // namespace seqpar::cuda_kernels
