// CUDA implementations of the entries in kernels/ops.h, same signatures, for tensors on a CUDA
// device (bf16, f16 or f32 activations, f32 accumulation). kernels/ops.cpp dispatches here by the
// tensors' device. Work is queued on the calling thread's current stream (core/cuda/stream.h).
#pragma once

#include <string>
#include <vector>

#include "kernels/ops.h"

namespace seqpar::cuda_ops {

void embedding_forward(Tensor& out, const Tensor& ids, const Tensor& wte);
void embedding_backward(Tensor& dwte, const Tensor& dout, const Tensor& ids);
void rmsnorm_forward(Tensor& out, Tensor& rstd, const Tensor& inp, const Tensor& weight, float eps);
void rmsnorm_backward(Tensor& dinp, Tensor& dweight, const Tensor& dout, const Tensor& inp, const Tensor& weight,
                      const Tensor& rstd, bool accumulate);
void layernorm_forward(Tensor& out, Tensor& mean, Tensor& rstd, const Tensor& inp, const Tensor& weight,
                       const Tensor& bias, float eps);
void layernorm_backward(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout, const Tensor& inp,
                        const Tensor& weight, const Tensor& mean, const Tensor& rstd, bool accumulate);
void gelu_forward(Tensor& out, const Tensor& inp, GeluKind kind);
void gelu_backward(Tensor& dinp, const Tensor& dout, const Tensor& inp, GeluKind kind);
void rope_forward(Tensor& x, const Tensor& position_ids, const Tensor& inv_freq, float scale);
void rope_backward(Tensor& dx, const Tensor& position_ids, const Tensor& inv_freq, float scale);
void head_norm_rope_forward(Tensor& out, Tensor& rstd, const Tensor& x, const Tensor& weight, float eps,
                            const Tensor& position_ids, const Tensor& inv_freq, float scale);
void head_norm_rope_backward(Tensor& dx, Tensor& dweight, const Tensor& dout, const Tensor& x, const Tensor& weight,
                             const Tensor& rstd, const Tensor& position_ids, const Tensor& inv_freq, float scale);
void swiglu_forward(Tensor& out, const Tensor& gate, const Tensor& up);
void swiglu_backward(Tensor& dgate, Tensor& dup, const Tensor& dout, const Tensor& gate, const Tensor& up,
                     Tensor* out = nullptr);
void matmul(Tensor& out, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, float alpha, float beta,
            const Tensor* c);
// The linear entries (kernels/cuda/matmul.cpp): cuBLASLt's BIAS, GELU_AUX(_BIAS) and DGELU epilogues
// where they apply (the output in the operands' dtype, aux rows a multiple of 8 elements, GELU's
// tanh form, an algorithm for the shape), else matmul and the separate kernels.
void linear_forward(Tensor& y, const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor* residual);
void linear_gelu_forward(Tensor& h, Tensor& pre, const Tensor& x, const Tensor& w, const Tensor* bias, GeluKind kind);
void linear_backward_gelu(Tensor& dpre, const Tensor& dy, const Tensor& w, const Tensor& pre, GeluKind kind);
// Whether the calling thread's last linear entry ran fused (its epilogue in the GEMM).
bool last_linear_fused();
void cross_entropy_forward(Tensor& losses, const Tensor& logits, const Tensor& targets, Tensor* lse);
void cross_entropy_backward(Tensor& dlogits, const Tensor& logits, const Tensor& targets, float dloss,
                            const Tensor* lse);
void add_inplace(Tensor& y, const Tensor& x);
void bias_forward(Tensor& y, const Tensor& b);
void bias_backward(Tensor& db, const Tensor& dy);
void scale_inplace(Tensor& y, float s);
void normal_fill(Tensor& y, uint64_t key, float std, int64_t offset);
double sum_squares(const Tensor& x);
void check_device_errors(Device device);
// rounded (optional): the updated params also rounded into it, in the same pass.
void adamw_step(Tensor& param, Tensor& m, Tensor& v, const Tensor& grad, const AdamWConfig& cfg, int64_t step,
                float grad_scale, Tensor* rounded = nullptr);
void adamw_step_rounded(Tensor& param, Tensor& m, Tensor& v, const Tensor& grad, Tensor& rounded,
                        const AdamWConfig& cfg, int64_t step, float grad_scale);

// The CUDA side of ops.h's cast (whose CPU path is in ops.cpp): out = in converted between f32,
// bf16 and f16 (through f32, rounded once to nearest even), or copied when the dtypes match. Same shape, same device.
void cast(Tensor& out, const Tensor& in);

// ---- matmul's cuBLASLt configuration (kernels/cuda/matmul.cpp, docs/gemm.md) ----------------
//
// Per shape (M, N, K, transposes, dtypes, row lengths, pointer alignments) matmul keeps a plan on
// each thread and device, made on the shape's first call and kept for the process. It runs either
// cuBLASLt's heuristic first pick, or, autotuning (the default), the fastest of a pool of
// candidates timed on that first call (which then synchronises the stream and takes a scratch
// output of out's size from the pool, so out is not touched). The pool: up to 32 heuristic results
// of each of two families, and for long-K shapes (K >= 4 max(M, N)) split-K variants of the best
// few. Every candidate accumulates in f32; split-K partial sums are kept in f32 (for a bf16 or f16 out
// only CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE is allowed) and reduced in a fixed order.

enum class MatmulFamily {
  kDirect,   // out^T [N, M] = op(b)^T op(a)^T, column-major: cuBLASLt's A is b, B is a
  kSwapped,  // out [M, N] = op(a) op(b), D row-major (CUBLASLT_ORDER_ROW): A is a, B is b
};
const char* matmul_family_name(MatmulFamily family);  // "direct" | "swapped"

// One cuBLASLt configuration (values of cublasLtMatmulAlgoConfigAttributes_t).
struct MatmulConfig {
  MatmulFamily family = MatmulFamily::kDirect;
  int algo_id = -1;
  int tile_id = 0, stages_id = 0, cluster_id = 0, swizzle = 0, custom = 0;
  int split_k = 1;         // K splits (1: none)
  int reduction = 0;       // cublasLtReductionScheme_t of the split-K partial sums (0: none)
  size_t workspace = 0;    // bytes
  int heuristic_rank = 0;  // position in cuBLASLt's heuristic list of its family
  bool split_variant = false;  // split_k set by matmul, not by the heuristic
};
// e.g. "swapped algo=66 tile=20 stages=35 cluster=2 splitk=4/compute rank=3"
std::string matmul_config_str(const MatmulConfig& config);

// What one plan runs and, when it was autotuned, what the tuning measured.
struct MatmulTuning {
  MatmulConfig chosen;
  bool autotuned = false;
  int candidates = 0;         // size of the pool (autotuned plans)
  int timed = 0;              // candidates timed before the budget ran out
  double tune_ms = 0;         // host time of the tuning, stream synchronisation before it excluded
  double best_ms = 0;         // tuning's median of the chosen candidate
  double heuristic_ms = 0;    // tuning's median of the heuristic first pick (pool[0])
};

// What the last matmul call on this thread ran (bench, tests).
MatmulTuning last_matmul_tuning();

// Autotuning on or off and its budget: kernels/matmul_policy.h (set_matmul_policy).

// The candidate pool of matmul(out, a, b, trans_a, trans_b), in the order tuning tries them;
// [0] is the heuristic first pick. Same checks as matmul; nothing is run.
std::vector<MatmulConfig> matmul_candidates(const Tensor& out, const Tensor& a, const Tensor& b, bool trans_a,
                                            bool trans_b);
// Tests: the following matmul calls on this thread run candidate `index` of their shape's pool
// (an error if the pool is smaller) instead of the plan's choice; -1 returns to the plan.
void set_matmul_forced_candidate(int index);
// Drops this thread's plans: the next call of each shape plans (and tunes) again.
void clear_matmul_plans();

}  // namespace seqpar::cuda_ops
