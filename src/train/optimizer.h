// AdamW over a model's parameters (torch semantics), with global grad-norm clipping as
// torch.nn.utils.clip_grad_norm_ does it. State (moments) is f32, as are master weights.
#pragma once

#include <cstdint>

#include "comm/communicator.h"
#include "kernels/ops.h"
#include "model/llama.h"

namespace seqpar {

struct OptimizerConfig {
  AdamWConfig adamw;
  double clip = 0;  // max global grad norm; <= 0: no clipping
};

class AdamW {
 public:
  // params: the model's weights. When they are not f32 (bf16 compute weights) the optimizer keeps
  // an f32 master copy, updates it, and writes the rounded result back into params.
  AdamW(const LlamaConfig& model_config, const OptimizerConfig& config, const LlamaParams& params, Device device);

  // Global L2 norm of all gradients (before clipping). `extra_sum_squares` lets a caller add the
  // squares held elsewhere (e.g. other shards) — normally 0.
  static double grad_norm(LlamaParams& grads);
  // One step: clips by the given total norm (computed by the caller over every rank's gradients)
  // and updates params in place. Returns the clip coefficient used.
  float step(LlamaParams& params, LlamaParams& grads, double total_norm);

  int64_t step_count() const { return step_; }
  void set_lr(float lr) { config_.adamw.lr = lr; }
  const OptimizerConfig& config() const { return config_; }
  // The f32 weights: the master copy when there is one, else params itself.
  LlamaParams& weights(LlamaParams& params) { return has_master_ ? master_ : params; }
  bool has_master() const { return has_master_; }
  LlamaParams& exp_avg() { return m_; }
  LlamaParams& exp_avg_sq() { return v_; }
  void set_step_count(int64_t s) { step_ = s; }

 private:
  OptimizerConfig config_;
  LlamaParams m_, v_;
  bool has_master_ = false;
  LlamaParams master_;
  int64_t step_ = 0;
};

// Sums every rank's gradients over `comm` in place: one all-reduce of the grads' single buffer
// when they live in one (LlamaParams::all_in_flat, as LlamaModel allocates them), else one per
// tensor. The same sums either way (a reduction is element-wise).
void all_reduce_grads(Communicator& comm, LlamaParams& grads);

}  // namespace seqpar
