// The training loop: data -> SP shards -> forward/backward on every rank -> token-weighted loss
// over dp × sp -> gradient all-reduce -> clip -> AdamW, with logging, evaluation, metrics (JSONL
// and an SVG plot), checkpoints and bit-exact resume. Ranks are threads of this process (the
// `local` transport) or, when a launcher started one process per GPU, processes over NCCL
// (train/job.h); the mesh is dp_replicate × dp_shard × sp with sp = ulysses × ring.
// docs/training.md is the user's guide.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/profile.h"
#include "model/llama_config.h"
#include "parallel/kernel_policy.h"
#include "parallel/sp_attention.h"
#include "train/job.h"
#include "train/memory_plan.h"
#include "train/optimizer.h"
#include "train/recall_task.h"
#include "train/sp_batch.h"
#include "train/token_file.h"

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
  double warmup_min_lr = 0;     // WarmupLR, WarmupDecayLR
  double warmup_max_lr = 1e-3;  // WarmupLR, WarmupDecayLR
  int64_t warmup_num_steps = 1000;
  WarmupType warmup_type = WarmupType::kLog;
  int64_t total_num_steps = 0;  // WarmupDecayLR, WarmupCosineLR
  double warmup_min_ratio = 0;  // WarmupCosineLR
  double cos_min_ratio = 1e-4;  // WarmupCosineLR
};

struct TrainConfig {
  // Model: an HF directory, or (empty) the built-in `model` config with random init.
  std::string model_dir;
  LlamaConfig model;
  // Where every rank computes: the CPU (f32), or a GPU (bf16 weights and activations, f32
  // gradients and master weights; all ranks share it, as threads with the local transport).
  Device device = Device::cpu();
  float init_std = 0.02f;  // HF initializer_range for random init

  // Data: a token file (data_path), or when it is empty the built-in recall task (the demo). Each
  // step consumes micro_batch × grad_accum × dp sequences of task.seq_len tokens (the sequence
  // length of both sources). From a token file: TokenDataset's packed sequences (documents never
  // attend across, the loss mask honoured); an epoch is num_sequences / (micro × accum × dp) steps
  // (the rest of the epoch's sequences, a different set each epoch, is not used), then the next
  // epoch starts with a new order (token_data_batch).
  RecallTaskConfig task;
  std::string data_path;       // SPTOK1 token file; "" = the recall task
  std::string eval_data_path;  // token file for eval loss (with data_path only)
  bool shuffle = true;         // TokenDataset's per-epoch document and sequence order
  int micro_batch = 8;
  int grad_accum = 1;
  int64_t steps = 300;

  OptimizerConfig optimizer;
  int64_t warmup_steps = 20;  // linear warmup from 0
  float min_lr_ratio = 0.1f;  // cosine decay to lr * min_lr_ratio at the last step
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
  // Where the world's ranks run (train/job.h): threads of this process, or one process per GPU
  // over NCCL when a launcher started this one (kAuto picks).
  Transport transport = Transport::kAuto;
  // Memory: keep only each decoder layer's input in forward and recompute the layer in backward
  // (HF's gradient_checkpointing; the same gradients, the activations of one layer at a time).
  bool activation_checkpointing = false;
  // With activation_checkpointing: also keep each layer's attention output and context (q, k, v,
  // the LSE; O(tokens)), so backward recomputes the norms, projections' residual and MLP but not
  // attention or its communication (the costliest part of the recompute at long sequences).
  bool checkpoint_keep_attention = false;
  // With activation_checkpointing: each layer's kept input waits in host memory (pinned) between
  // its forward and backward (LlamaModel::set_checkpoint_offload; ALST's checkpoint offload).
  bool checkpoint_offload = false;
  // Tiled MLP (ALST's TiledMLP): each layer's MLP over tiles of this many tokens of a rank's shard,
  // its [tokens, intermediate] tensors one tile at a time, recomputed in backward. 0: untiled.
  int64_t mlp_tile_tokens = 0;
  // Tiled loss: the LM head and cross-entropy over tiles of this many tokens, never a [tokens,
  // vocab] logits tensor in training steps (evaluation of the recall task still takes whole
  // logits). 0: untiled.
  int64_t loss_tile_tokens = 0;
  // ZeRO (DeepSpeed's zero_optimization.stage): >= 1 shards the AdamW state (moments, f32 master
  // weights) over the world's ranks, each updating its shard of the weights, which are then
  // all-gathered; >= 2 also partitions the gradients (each layer's summed over the world as its
  // backward ends, only the rank's shard kept). Weights are not partitioned (3 runs as 2).
  int zero_stage = 0;
  // Hugging Face's attn_implementation (Accelerate's parallelism_config_sp_attn_implementation):
  // on CUDA, sdpa runs cuDNN's fused attention where it is exact and seqpar's flash kernel
  // elsewhere, flash_attention_2 / flash_attention_3 always the flash kernel
  // (attention_backend.h); eager is an error. The CPU has one attention. The default is the
  // flash kernel: with sdpa the GPU demo (sp = 4 Ulysses, one head per rank) learns less well
  // than with flash, not yet explained (docs/training.md).
  std::string attn_implementation = "flash_attention_2";
  // The kernel choices (parallel/kernel_policy.h): `seqpar train` passes the environment's
  // (cli/kernel_env.h). attention.backend is replaced by attn_implementation's on CUDA; the
  // process-level parts (matmul, profile) are the caller's to apply.
  KernelPolicy kernels;
  bool time_steps = false;  // benchmarks: synchronise the device at each step's end (see TrainResult)
  // Op-level profile (core/profile.h) of the leading rank's steps after the first (the first
  // tunes the GEMMs and fills the allocator's cache; a one-step run profiles that step): the
  // device time per op and shape, in TrainResult.profile. Implies time_steps.
  bool profile = false;

  // Output.
  int log_every = 10;
  int eval_every = 50;  // evaluate every N steps and after the last (0: only after the last)
  // Per evaluation: recall batches of micro_batch sequences (the task's accuracy), or
  // micro-batches per dp rank of eval_data_path's first sequences (eval loss). Token data without
  // eval_data_path has no evaluation.
  int eval_batches = 2;
  double stop_at_accuracy = 0;  // > 0: stop once an evaluation reaches it (the recall task)
  std::string metrics_out;      // JSONL, one record per logged step and per evaluation; the plot
                                // goes to metrics_plot_path(metrics_out) at the end
  bool quiet = false;

  // Checkpoints (train/checkpoint.h). save_every > 0 saves after every save_every-th step, and a
  // run with a save_dir also saves after its last step.
  std::string save_dir;
  int64_t save_every = 0;
  int keep_last = 0;  // > 0: keep only the newest keep_last checkpoints
  // "" (start fresh), "latest" (save_dir's newest checkpoint; an error when there is none),
  // "auto" (save_dir's newest when there is one, else start fresh), or a path: a checkpoint
  // directory or a save directory (its newest).
  std::string resume;
  int64_t stop_at_step = 0;  // > 0: stop after this step, leaving the schedule as for `steps`
  std::string config_text;   // the resolved configuration text, recorded in checkpoints

  // InputError naming the setting, the value and the rule, before any work.
  void validate() const;
  int world() const { return sp * dp_replicate * dp_shard; }
};

struct TrainResult {
  std::vector<double> losses;  // per step, from step 1 (a resumed run includes the checkpoint's history)
  std::vector<std::pair<int64_t, double>> eval_accuracy;  // (step, accuracy): the recall task
  std::vector<std::pair<int64_t, double>> eval_loss;      // (step, loss): --eval-data
  int64_t steps_run = 0;                                  // the last step done
  int64_t first_step = 1;  // the first step this call ran (checkpoint step + 1 when resumed)
  double tokens_per_s = 0;
  // Token data: sequences per epoch, steps per epoch, and where the stream stands at the end.
  int64_t num_sequences = 0;
  int64_t steps_per_epoch = 0;
  int64_t data_epoch = 0, data_index = 0;
  std::vector<std::string> checkpoints;  // written by this call, in order
  // Timing and memory of this call's steps (with time_steps: the device synchronised at each
  // step's end, so a step's seconds are its whole work): wall seconds per step, each step's
  // device-allocator peak and the largest (all ranks of this process on that device).
  std::vector<double> step_seconds;
  std::vector<int64_t> step_peak_bytes;  // each step's own peak (the first includes the run's setup)
  int64_t peak_mem_bytes = 0;
  // With TrainConfig::profile: the op totals over the profiled steps, their count and wall seconds.
  std::vector<ProfileEntry> profile;
  int64_t profile_steps = 0;
  double profile_seconds = 0;
  std::string resumed_from;              // the checkpoint directory, when resumed
};

// HF-style random init: normal(0, std) for embeddings and projections, ones for norms.
void init_llama_params(LlamaParams& params, uint64_t seed, float std);

// The learning rate of a step (1-based) under the config's schedule (lr_schedule_of, scheduled_lr).
float lr_at(const TrainConfig& config, int64_t step);

TrainResult run_training(const TrainConfig& config);

// The memory plan's inputs for a training configuration of `model` (the mesh's world and Ulysses
// degree, the sequence, the levers, ZeRO): what run_training logs and `--print-config` prints.
MemoryPlanInput memory_plan_input(const TrainConfig& config, const LlamaConfig& model);

// The sequences that micro-batch `micro` (0-based) of `step` (1-based) reads on data-parallel rank
// dp_rank from a token file: with M = micro_batch × grad_accum × dp sequences per step and
// E = num_sequences / M steps per epoch, step s reads epoch (s-1) / E, sequences
// ((s-1) mod E) × M + (micro × dp + dp_rank) × micro_batch + j, j < micro_batch. (dp = 2 with one
// micro-batch reads what dp = 1 with two does, as for the recall task.) InputError when the
// file holds fewer than M sequences.
std::vector<Sequence> token_data_batch(const TokenDataset& data, const TrainConfig& config, int dp, int64_t step,
                                       int micro, int dp_rank);
// (epoch, index) of the first sequence the step after `steps_done` reads.
std::pair<int64_t, int64_t> token_data_position(int64_t num_sequences, int64_t sequences_per_step, int64_t steps_done);

// Where the plot of a metrics file goes: its extension replaced by .svg (metrics.jsonl -> metrics.svg).
std::string metrics_plot_path(const std::string& metrics_out);

// The built-in tiny Llama of the demo (GQA with fewer KV heads than the default sp degree, so
// Ulysses' KV-head replication is exercised).
LlamaConfig demo_model_config();

}  // namespace seqpar
