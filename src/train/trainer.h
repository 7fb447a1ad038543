// The training loop: data -> SP shards -> forward/backward on every rank -> token-weighted loss
// over dp × sp -> gradient all-reduce -> clip -> AdamW, with logging, evaluation, metrics (JSONL
// and an SVG plot), checkpoints and bit-exact resume. Ranks are threads of this process (the
// `local` transport) or, when a launcher started one process per GPU, processes over NCCL
// (train/job.h); the mesh is dp_replicate × dp_shard × sp with sp = ulysses × ring.
// docs/training.md is the user's guide.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "arch/llama_config.h"
#include "core/profile.h"
#include "data/recall_task.h"
#include "data/sp_batch.h"
#include "data/token_file.h"
#include "parallel/sp_attention.h"
#include "train/config.h"
#include "train/job.h"
#include "train/memory_plan.h"
#include "train/optimizer.h"
#include "train/step.h"

namespace seqpar {

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
  // Each step's largest peak of one rank (Allocator::rank_peak_bytes: on the CPU, ranks as threads
  // kept apart; a GPU's pool answers its whole peak).
  std::vector<int64_t> step_rank_peak_bytes;
  int64_t peak_mem_bytes = 0;
  // With LoggingSettings::profile: the op totals over the profiled steps, their count and wall seconds.
  std::vector<ProfileEntry> profile;
  int64_t profile_steps = 0;
  double profile_seconds = 0;
  std::string resumed_from;  // the checkpoint directory, when resumed
  // Every step (of the whole run, a resumed one's included) whose update was skipped: by the
  // non-finite guard (its loss or gradient norm NaN or inf), or by fp16's loss scaler on an
  // overflow (DeepSpeed's skipped steps; those are also in overflow_steps, and never count towards
  // max_nonfinite_steps).
  std::vector<int64_t> skipped_steps;
  std::vector<int64_t> overflow_steps;
  double loss_scale = 1;    // fp16: the loss scaler's scale after the last step (1 without fp16)
  int64_t empty_steps = 0;  // steps of this call whose batch held no token with a label
  int stop_signal = 0;      // SIGTERM / SIGINT that stopped this call early (after a save), or 0
};

// HF-style random init of a model of `config`: normal(0, std) for embeddings and projections, ones
// for norm weights, zeros for every bias (LayerNorm's and the projections', as transformers' and
// Megatron's inits); the GPT family's residual outputs (attention o_proj, MLP down_proj: GPT-2's
// c_proj) normal(0, std / sqrt(2 num_layers)), as transformers' GPT2 and Megatron's
// output_layer_init_method. Each tensor's draws are a function of (seed, its index, element) alone.
// params on the host; draw_on a GPU draws there (the same values) and copies them back.
void init_llama_params(LlamaParams& params, const LlamaConfig& config, uint64_t seed, float std,
                       Device draw_on = Device::cpu());

// The learning rate of a step (1-based) under the config's schedule (lr_schedule_of, scheduled_lr).
float lr_at(const TrainConfig& config, int64_t step);

class TrainStep;
struct Checkpoint;
class TokenDataset;

// The training run, in named phases. Every command that trains runs through it: `seqpar train`
// (run), `seqpar bench train` (run, timed) and `seqpar fwdbwd` (run_batch):
//   setup     (the constructor) the configuration validated, the launch checked, and everything
//             the run reads opened and checked before any rank starts: the checkpoint to resume,
//             the model, the token files; the memory plan said;
//   resume    the checkpoint's history, data position and configuration taken over (setup), its
//             weights and optimizer state restored on every rank (a rank's first act);
//   step      one step's micro-batches through TrainStep (train/step.h): forward, backward,
//             gradient sums, clip, AdamW at the schedule's lr;
//   evaluate  the recall task's accuracy, or the --eval-data loss;
//   save      a checkpoint (the whole optimizer state assembled under ZeRO);
//   finish    the result, the profile, the metrics plot.
// and the run's guards (docs/RELIABILITY.md): the save directory locked for the trainer's life
// (SaveDirLock); a step with a non-finite loss or gradient norm never updating the weights
// (on_nonfinite: skip it, or abort at the max_nonfinite_steps-th in a row), decided by every rank
// alike — except fp16's overflows, which the dynamic loss scaler takes (the step skipped, the
// scale lowered: train/loss_scaler.h) without counting them as divergence; a step with no token to learn from counted,
// and a run where every step has none refused; SIGTERM / SIGINT ending the run after the current step with a checkpoint
// (train/stop_signals.h).
class Trainer {
 public:
  explicit Trainer(const TrainConfig& config);
  // A trainer whose step reads `batch` (seqpar fwdbwd's rows, HF convention: unshifted labels)
  // instead of a data source; run_batch runs it.
  Trainer(const TrainConfig& config, std::vector<Sequence> batch);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Steps first_step..last_step (resumed: from the checkpoint's step + 1), evaluating and saving
  // as configured.
  TrainResult run();
  // One step on the batch: its forward and backward and, with `optimizer_step`, the optimizer step
  // at the optimizer's lr. Returns, in HF shapes and f32: logits [B, S, V], loss [1], grad.<name>
  // for every parameter and, with optimizer_step, grad_norm [1] and param.<name> after the step.
  // Under the nccl transport only the leader process gets them; the others get an empty list.
  std::vector<std::pair<std::string, Tensor>> run_batch(bool optimizer_step);

  const LlamaConfig& model_config() const { return model_config_; }

 private:
  // setup
  void setup_data();
  void setup_resume();
  void setup_model();
  void resolve_checkpoint_placement(const LlamaConfig& mc);
  void log_setup() const;
  // a rank's phases
  void run_rank(JobRank& job);
  void restore(TrainStep& rank, JobRank& job);
  std::vector<SpBatch> step_batches(int64_t step, int dp_rank) const;
  void refuse_if_over_capacity(Device device) const;
  struct StepOutcome {
    bool nonfinite = false;  // the loss or the gradient norm was NaN or inf (and no scaler took it): no update
    bool overflow = false;   // fp16: the gradients overflowed and the loss scaler took it: no update
    bool stop = false;       // a signal asked the run to stop after this step
    LossScaler::Update scale;  // fp16: the step's loss scale and the next one
    bool skipped() const { return nonfinite || overflow; }
  };
  StepOutcome step(TrainStep& rank, bool leader, int64_t step, bool profiled);
  [[noreturn]] void abort_nonfinite(bool leader, int64_t step, int64_t in_a_row);
  bool evaluate(TrainStep& rank, bool leader, int64_t step);  // true: stop_at_accuracy reached
  double evaluate_recall(TrainStep& rank, bool leader, int64_t step);
  void evaluate_loss(TrainStep& rank, bool leader, int64_t step);
  void save(TrainStep& rank, bool leader, int64_t step);
  void record_step(Device device, int64_t step, double seconds, const StepLoss& loss, double norm, bool profiled,
                   const StepOutcome& outcome);
  void log_progress(int64_t step, double loss, double norm, bool record, const StepOutcome& outcome, bool empty);
  void finish();

  struct State;
  TrainConfig cfg_;
  LlamaConfig model_config_;
  std::unique_ptr<State> s_;
};

// Trainer(config).run().
TrainResult run_training(const TrainConfig& config);

// The memory plan's inputs for a training configuration of `model` (the mesh's world and Ulysses
// degree, the sequence, the levers, ZeRO): what run_training logs and `--print-config` prints.
MemoryPlanInput memory_plan_input(const TrainConfig& config, const LlamaConfig& model);
// checkpoint_placement=auto for `config` on `model`: the memory plan's choice (its short form) from
// fixed figures, the same in every process of a launch (the device's total memory less 2%, and
// --host-memory-gib or the host's MemTotal shared by its ranks); "" when nothing fits.
// ranks_per_device: the ranks (threads) sharing the device.
std::string auto_checkpoint_placement(const TrainConfig& config, const LlamaConfig& model, int ranks_per_device);

// The data's document semantics on rows read from a token file (DataSettings): with document_mask
// false each row becomes one stream (doc_lens cleared), and with eod_mask_loss too every later
// document's first label becomes -100 (Megatron's --eod-mask-loss). Nothing with document_mask.
void apply_document_mask(std::vector<Sequence>& rows, const DataSettings& data);

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
