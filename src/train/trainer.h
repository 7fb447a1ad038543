// The training loop: data -> SP shards -> forward/backward on every rank -> token-weighted loss
// over dp × sp -> gradient all-reduce -> clip -> AdamW, with logging, evaluation and metrics.
// Ranks are threads of this process (the `local` transport); the mesh is dp_replicate ×
// dp_shard × sp with sp = ulysses × ring.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/llama_config.h"
#include "parallel/sp_attention.h"
#include "train/optimizer.h"
#include "train/recall_task.h"
#include "train/sp_batch.h"

namespace seqpar {

// The learning-rate schedule. kLinearCosine is seqpar's own (linear warmup from 0, cosine decay to
// min_lr_ratio × lr at the last step); the other three are DeepSpeed's schedulers, computed as
// deepspeed/runtime/lr_schedules.py does, step for step (docs/configs.md). scheduled_lr()
// (train/config_resolve.h) evaluates one.
enum class LrScheduleType { kLinearCosine, kWarmupLR, kWarmupDecayLR, kWarmupCosineLR };
enum class WarmupType { kLog, kLinear };

struct LrSchedule {
  LrScheduleType type = LrScheduleType::kLinearCosine;
  // kLinearCosine: the peak lr, warmup steps, floor ratio and run length. kWarmupCosineLR: base_lr
  // is the optimizer's lr (DeepSpeed's org_lr), which the ratios multiply.
  double base_lr = 1e-3;
  int64_t warmup_steps = 20;
  double min_lr_ratio = 0.1;
  int64_t total_steps = 300;
  // DeepSpeed's parameters, with its defaults.
  double warmup_min_lr = 0;        // WarmupLR, WarmupDecayLR
  double warmup_max_lr = 1e-3;     // WarmupLR, WarmupDecayLR
  int64_t warmup_num_steps = 1000;
  WarmupType warmup_type = WarmupType::kLog;
  int64_t total_num_steps = 0;     // WarmupDecayLR, WarmupCosineLR
  double warmup_min_ratio = 0;     // WarmupCosineLR
  double cos_min_ratio = 1e-4;     // WarmupCosineLR
};

struct TrainConfig {
  // Model: an HF directory, or (empty) the built-in `model` config with random init.
  std::string model_dir;
  LlamaConfig model;
  float init_std = 0.02f;  // HF initializer_range for random init

  // Data: the built-in recall task (the demo). Each step consumes micro_batch × grad_accum × dp
  // sequences of task.seq_len tokens.
  RecallTaskConfig task;
  int micro_batch = 8;
  int grad_accum = 1;
  int64_t steps = 300;

  OptimizerConfig optimizer;
  int64_t warmup_steps = 20;    // linear warmup from 0
  float min_lr_ratio = 0.1f;    // cosine decay to lr * min_lr_ratio at the last step
  uint64_t seed = 1234;
  // The schedule's type and DeepSpeed's parameters (set from a DeepSpeed config). For
  // kLinearCosine, lr_schedule_of() takes the peak, warmup, floor and length from the fields above.
  LrSchedule lr_schedule;

  // Parallelism.
  int sp = 4;
  SpMode sp_mode = SpMode::kUlysses;
  int ulysses_degree = 0;  // hybrid only
  SpLayout layout = SpLayout::kZigzag;
  int dp_replicate = 1;
  int dp_shard = 1;

  // Output.
  int log_every = 10;
  int eval_every = 50;
  int eval_batches = 2;
  double stop_at_accuracy = 0;  // > 0: stop once an evaluation reaches it
  std::string metrics_out;     // JSONL, one record per logged step and per evaluation
  bool quiet = false;

  // InputError naming the setting, the value and the rule, before any work.
  void validate() const;
  int world() const { return sp * dp_replicate * dp_shard; }
};

struct TrainResult {
  std::vector<double> losses;  // per step
  std::vector<std::pair<int64_t, double>> eval_accuracy;  // (step, accuracy)
  int64_t steps_run = 0;
  double tokens_per_s = 0;
};

// HF-style random init: normal(0, std) for embeddings and projections, ones for norms.
void init_llama_params(LlamaParams& params, uint64_t seed, float std);

// The learning rate of a step (1-based) under the config's schedule (lr_schedule_of, scheduled_lr).
float lr_at(const TrainConfig& config, int64_t step);

TrainResult run_training(const TrainConfig& config);

// The built-in tiny Llama of the demo (GQA with fewer KV heads than the default sp degree, so
// Ulysses' KV-head replication is exercised).
LlamaConfig demo_model_config();

}  // namespace seqpar
