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

// ZeRO stage 1: the optimizer state (moments, f32 master weights) of rank `rank` of `size` ranks
// that hold the same weights is one contiguous shard of the weights' single buffer; size 1: all.
struct ZeroShard {
  int rank = 0;
  int size = 1;
};

class AdamW {
 public:
  // params: the model's weights. When they are not f32 (bf16 compute weights) the optimizer keeps
  // an f32 master copy, updates it, and writes the rounded result back into params. With a shard
  // of size > 1 (params must live in one buffer, LlamaParams::all_in_flat), this rank keeps and
  // updates only its shard: step() updates that part of params, and gather_params() brings
  // every rank's part to every rank.
  AdamW(const LlamaConfig& model_config, const OptimizerConfig& config, const LlamaParams& params, Device device,
        ZeroShard shard = {});

  // Global L2 norm of all gradients (before clipping). `extra_sum_squares` lets a caller add the
  // squares held elsewhere (e.g. other shards) — normally 0.
  static double grad_norm(LlamaParams& grads);
  // One step: clips by the given total norm (computed by the caller over every rank's gradients)
  // and updates params in place. Returns the clip coefficient used.
  float step(LlamaParams& params, LlamaParams& grads, double total_norm);
  // Sharded only, with partitioned gradients (ZeRO stage 2): the same step from this rank's
  // gradient shard alone, f32 [shard_len()] (elements [shard_begin(), shard_end()) of the buffer).
  float step_shard(LlamaParams& params, const Tensor& grad_shard, double total_norm);
  // Elements per rank of a buffer of `total` sharded over `world` (shards start on
  // LlamaParams::kFlatAlign boundaries; the last may be shorter).
  static int64_t shard_len_for(int64_t total, int world);
  int64_t shard_begin() const { return begin_; }
  int64_t shard_end() const { return end_; }
  int64_t shard_len() const { return shard_len_; }

  // Sharded: all-gathers the updated shards of params over `comm` (the ranks of the shard; every
  // one calls it after step()). Not sharded: nothing to do.
  void gather_params(Communicator& comm, LlamaParams& params);
  bool sharded() const { return shard_.size > 1; }

  // Sharded only: the whole optimizer state for a checkpoint, a collective over `comm` that
  // assembles every rank's shard (temporary full-size buffers); master is filled only with
  // has_master(). Not sharded, the state is exp_avg() / exp_avg_sq() / weights().
  struct FullState {
    LlamaParams exp_avg, exp_avg_sq, master;
  };
  FullState full_state(Communicator& comm, const LlamaConfig& model_config);
  // Sharded only: loads a whole optimizer state, keeping this rank's shard. master: the f32
  // weights when has_master() (ignored otherwise).
  void load_full_state(const LlamaParams& exp_avg, const LlamaParams& exp_avg_sq, const LlamaParams* master);

  int64_t step_count() const { return step_; }
  void set_lr(float lr) { config_.adamw.lr = lr; }
  const OptimizerConfig& config() const { return config_; }
  // The f32 weights: the master copy when there is one, else params itself. Not sharded only.
  LlamaParams& weights(LlamaParams& params);
  bool has_master() const { return has_master_; }
  // Not sharded only (sharded: full_state / load_full_state).
  LlamaParams& exp_avg();
  LlamaParams& exp_avg_sq();
  void set_step_count(int64_t s) { step_ = s; }

 private:
  OptimizerConfig config_;
  LlamaParams m_, v_;
  bool has_master_ = false;
  LlamaParams master_;
  int64_t step_ = 0;
  // Sharded: elements [begin_, end_) of the weights' buffer (total_ elements), state in f32
  // buffers of shard_len_ elements (the last rank's shard may be shorter than shard_len_).
  ZeroShard shard_;
  int64_t total_ = 0, shard_len_ = 0, begin_ = 0, end_ = 0;
  Tensor m_shard_, v_shard_, master_shard_;
};

// Sums every rank's gradients over `comm` in place: one all-reduce of the grads' single buffer
// when they live in one (LlamaParams::all_in_flat, as LlamaModel allocates them), else one per
// tensor. The same sums either way (a reduction is element-wise).
void all_reduce_grads(Communicator& comm, LlamaParams& grads);

}  // namespace seqpar
