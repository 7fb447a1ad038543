// The training settings: TrainConfig (what a run is), and the one declaration of every user
// setting (train_settings()): its name, its group, its command-line flags, the DeepSpeed and
// Accelerate keys that set it, its default, its rule and its help. The CLI (cli/train_cmd.cpp,
// cli/fwdbwd_cmd.cpp, cli/bench_train.cpp), `--print-config` and the docs table
// (docs/configs.md, `seqpar train --settings-table`) are made from the declaration, and the
// checkpoint's resume rules (train/checkpoint.h) come from it; a new setting is one declaration
// plus its use.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "arch/llama_config.h"
#include "attention/attention_backend.h"
#include "core/device.h"
#include "core/error.h"
#include "data/recall_task.h"
#include "parallel/kernel_policy.h"
#include "parallel/sp_attention.h"
#include "train/job.h"
#include "train/loss_scaler.h"
#include "train/memory_settings.h"
#include "train/optimizer.h"

namespace seqpar {

// The learning-rate schedule. kLinearCosine is seqpar's own (linear warmup from 0, cosine decay to
// min_lr_ratio × lr at the last step: the demo's); kLinear is HF Trainer's default
// (get_linear_schedule_with_warmup: linear warmup, then linear decay to 0 at the last step);
// kConstant is the lr unchanged (DeepSpeed's engine with no scheduler); the other three are
// DeepSpeed's schedulers, computed as deepspeed/runtime/lr_schedules.py does, step for step
// (docs/configs.md). scheduled_lr() (train/config_resolve.h) evaluates one.
enum class LrScheduleType { kLinearCosine, kWarmupLR, kWarmupDecayLR, kWarmupCosineLR, kLinear, kConstant };
// The text form of a schedule type (the --lr-schedule value, the checkpoint's), and back.
const char* lr_schedule_type_name(LrScheduleType type);
LrScheduleType parse_lr_schedule_type(const std::string& text, const std::string& setting);
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

// Where a run starts: fresh (kNone), save_dir's newest checkpoint (kLatest: an error when there
// is none), save_dir's newest when there is one, else fresh (kAuto), or a path: a checkpoint
// directory or a save directory (its newest). Its text form (the flag's and the JSON's): "",
// "latest", "auto" or the path.
struct ResumeFrom {
  enum class Kind { kNone, kLatest, kAuto, kPath };
  Kind kind = Kind::kNone;
  std::string path;  // kPath only

  static ResumeFrom parse(const std::string& text);
  std::string str() const;
  bool none() const { return kind == Kind::kNone; }
  bool from_save_dir() const { return kind == Kind::kLatest || kind == Kind::kAuto; }
  bool operator==(const ResumeFrom&) const = default;
};

// The settings by group, as the declaration (train_settings()) groups them: each group is one
// struct, and a setting is a field of its group's (cfg.data.micro_batch, cfg.parallel.sp).

// Model: an HF directory, or (empty) the built-in `arch` with random init: the demo's tiny Llama,
// or a preset's architecture (arch/llama_config.h llama_preset; `preset` names it).
struct ModelSettings {
  std::string dir;  // HF model directory; "" = the built-in model
  std::string preset;
  LlamaConfig arch;
  float init_std = 0.02f;  // HF initializer_range for random init
  // Hugging Face's attn_implementation (Accelerate's parallelism_config_sp_attn_implementation):
  // on CUDA, sdpa (the default, as in transformers) runs cuDNN's fused attention where it is exact
  // and measured faster (backend auto) and seqpar's flash kernel elsewhere, flash_attention_2 /
  // flash_attention_3 always the flash kernel (attention_backend.h); eager is an error. The CPU
  // has one attention.
  AttnImplementation attn_implementation = AttnImplementation::kSdpa;
};

// Data: a token file (path), or when it is empty the built-in recall task (the demo). Each step
// consumes micro_batch × grad_accum × dp sequences of task.seq_len tokens (the sequence length of
// both sources). From a token file: TokenDataset's packed sequences (documents never attend
// across, the loss mask honoured); an epoch is num_sequences / (micro × accum × dp) steps (the rest
// of the epoch's sequences, a different set each epoch, is not used), then the next epoch starts
// with a new order (token_data_batch).
struct DataSettings {
  RecallTaskConfig task;
  std::string path;       // SPTOK1 token file; "" = the recall task
  std::string eval_path;  // token file for eval loss (with path only)
  bool shuffle = true;    // TokenDataset's per-epoch document and sequence order
  // Token data: attention stays inside each packed document and positions restart per document
  // (HF's packing; Megatron's --reset-attention-mask --reset-position-ids). false: a sequence is one
  // stream, its documents attending to the ones before them and positions running on (Megatron's
  // default, its documents separated only by the EOD token).
  bool document_mask = true;
  // With document_mask false: a document's first token is no target (Megatron's --eod-mask-loss:
  // the EOD before it predicts nothing). With document_mask it is so already.
  bool eod_mask_loss = false;
  int micro_batch = 8;
  int grad_accum = 1;
  // Megatron's global batch (sequences per step; > 0 derives grad_accum = global / (micro × dp),
  // resolved by config_resolve). 0: not given.
  int64_t global_batch = 0;
  // Per evaluation: recall batches of micro_batch sequences (the task's accuracy), or
  // micro-batches per dp rank of eval_path's first sequences (eval loss). Token data without
  // eval_path has no evaluation.
  int eval_batches = 2;
};

// Parallelism, and the device every rank computes on: the CPU (f32), or a GPU (bf16 or f16 weights
// and activations, PrecisionSettings; f32 gradients and master weights; all ranks share it, as
// threads with the local transport).
struct ParallelSettings {
  int sp = 4;
  SpMode sp_mode = SpMode::kUlysses;
  int ulysses_degree = 0;  // hybrid only
  SpLayout layout = SpLayout::kZigzag;
  int dp_replicate = 1;
  int dp_shard = 1;
  Device device = Device::cpu();
  // Where the world's ranks run (train/job.h): threads of this process, or one process per GPU
  // over NCCL when a launcher started this one (kAuto picks).
  Transport transport = Transport::kAuto;

  int world() const { return sp * dp_replicate * dp_shard; }
};

// The 16-bit type a GPU computes in (weights and activations; gradients, master weights, moments,
// the loss and LSE stay f32): bf16 (f32's exponent range) or fp16 (IEEE binary16: more mantissa,
// range [2^-24, 65504], so the loss is scaled: train/loss_scaler.h). The CPU computes in f32 with
// either; with fp16 it runs the loss scaler all the same (the scaler's reference; its overflows are
// then only those of f32).
enum class Precision { kBf16, kFp16 };
const char* precision_name(Precision precision);  // "bf16" | "fp16"
Precision parse_precision(const std::string& text, const std::string& flag);

struct PrecisionSettings {
  Precision mixed_precision = Precision::kBf16;
  LossScalerConfig scaler;  // fp16 only

  bool fp16() const { return mixed_precision == Precision::kFp16; }
  // The dtype of the compute weights and activations on `device`: f32 on the CPU, else bf16 or f16.
  DType compute_dtype(Device device) const;
};

// The run's length and learning-rate schedule, and the seed.
struct ScheduleSettings {
  int64_t steps = 300;
  int64_t warmup_steps = 20;  // linear warmup from 0
  float min_lr_ratio = 0.1f;  // cosine decay to lr * min_lr_ratio at the last step
  // Megatron's run lengths in other units, resolved by config_resolve into the fields above:
  // train_tokens (> 0: steps = ceil(train_tokens / tokens per step)), warmup_tokens (> 0:
  // warmup_steps = ceil(warmup_tokens / tokens per step)), min_lr (>= 0: min_lr_ratio = min_lr /
  // lr). 0 (-1 for min_lr): not given.
  int64_t train_tokens = 0;
  int64_t warmup_tokens = 0;
  double min_lr = -1;
  uint64_t seed = 1234;
  // The schedule's type and DeepSpeed's parameters (set from a DeepSpeed config). For
  // kLinearCosine, lr_schedule_of() takes the peak, warmup, floor and length from the fields above.
  LrSchedule lr;
};

// Checkpoints (train/checkpoint.h) and what a diverging step does. save_every > 0 saves after
// every save_every-th step, and a run with a save_dir also saves after its last step.
struct CheckpointSettings {
  std::string save_dir;
  int64_t save_every = 0;
  int keep_last = 0;  // > 0: keep only the newest keep_last checkpoints
  ResumeFrom resume;
  int64_t stop_at_step = 0;  // > 0: stop after this step, leaving the schedule as for `steps`
  // The non-finite guard (train/trainer.h): a step whose loss or gradient norm is NaN or inf never
  // updates the weights; "abort" stops the run at the max_nonfinite_steps-th such step in a row (the
  // earlier ones skipped), "skip" skips them all (counted in the log and the metrics).
  std::string on_nonfinite = "abort";
  int max_nonfinite_steps = 1;
};

// Output: progress lines, evaluations, metrics, profiling.
struct LoggingSettings {
  int log_every = 10;
  int eval_every = 50;          // evaluate every N steps and after the last (0: only after the last)
  double stop_at_accuracy = 0;  // > 0: stop once an evaluation reaches it (the recall task)
  std::string metrics_out;      // JSONL, one record per logged step and per evaluation; the plot
                                // goes to metrics_plot_path(metrics_out) at the end
  bool quiet = false;
  bool time_steps = false;  // benchmarks: synchronise the device at each step's end (see TrainResult)
  // Op-level profile (core/profile.h) of the leading rank's steps after the first (the first
  // tunes the GEMMs and fills the allocator's cache; a one-step run profiles that step): the
  // device time per op and shape, in TrainResult.profile. Implies time_steps.
  bool profile = false;
};

struct TrainConfig {
  ModelSettings model;
  DataSettings data;
  ParallelSettings parallel;
  PrecisionSettings precision;
  // The memory levers (train/memory_settings.h): the group the memory plan takes whole.
  MemorySettings memory;
  OptimizerConfig optimizer;
  ScheduleSettings schedule;
  CheckpointSettings checkpoint;
  LoggingSettings logging;

  std::string config_text;  // the resolved configuration text, recorded in checkpoints
  // The kernel choices (parallel/kernel_policy.h), not user settings: the process's (the
  // SEQPAR_* overrides, read once by cli/) by default; the attention's backend comes from
  // model.attn_implementation on CUDA.
  KernelPolicy kernels;
  // The foreign flags given (foreign_flags() below): flag and value ("" for a switch), in order;
  // config_resolve refuses or notes each.
  std::vector<std::pair<std::string, std::string>> foreign_given;

  // InputError naming the setting, the value and the rule, before any work.
  // Every problem at once: the overloads taking Problems add to it instead of throwing.
  void validate() const;
  void validate(Problems& problems) const;
  // The same without the data source's rules (a trainer of one given batch: seqpar fwdbwd).
  void validate_run() const;
  void validate_run(Problems& problems) const;
  int world() const { return parallel.world(); }
};

// ---- the declaration ------------------------------------------------------------------------

// Whose defaults a run gets for what neither a flag nor a file sets (docs/configs.md). The demo's
// (`seqpar train` with no model, data or config file) are its own; a run from a DeepSpeed file
// with "auto" values, an Accelerate config, or a model / data of its own gets HF Trainer's
// (TrainingArguments' defaults, the tool those files come from); a bare DeepSpeed file (no
// "auto": no Trainer fills it) gets DeepSpeed's engine defaults.
enum class DefaultsSource { kDemo, kHfTrainer, kDeepSpeed };
// "demo default", "HF Trainer default", "DeepSpeed default": how --print-config names the source.
const char* defaults_source_name(DefaultsSource source);

// A numeric setting's rule: the value is finite and lies in the range (bounds open or closed).
struct NumberRule {
  double lo = -HUGE_VAL, hi = HUGE_VAL;
  bool lo_open = false, hi_open = false;
  std::string text() const;  // "> 0", "in [0, 1)", ">= 1"
};

enum class SettingGroup { kModel, kData, kParallel, kPrecision, kMemory, kOptimizer, kSchedule, kCheckpoint, kLogging };
const char* setting_group_name(SettingGroup group);

// What a checkpoint's recorded value of a setting means for a resumed run.
enum class ResumeRule {
  kFree,       // may change (output, checkpoint and logging settings)
  kWarn,       // may change, with a warning: the run is no longer bit-exact with an uninterrupted one
  kMustMatch,  // must equal the checkpoint's (InputError naming both values)
};

// The commands that take a setting on their command line.
enum SettingCommand : unsigned { kTrainCommand = 1u, kFwdBwdCommand = 2u, kBenchTrainCommand = 4u };

// Another tool's spelling of a setting's flag (Megatron-DeepSpeed's `--clip-grad` for `clip`): its own
// command-line option, whose value becomes the setting's (translated when the two spell values
// differently), so --print-config names the flag the user gave.
struct FlagAlias {
  std::string flag;        // "--clip-grad"
  std::string tool;        // "Megatron-DeepSpeed"
  bool is_switch = false;  // a flag without a value: it sets switch_value
  std::string switch_value = "true";
  // The alias's value -> the setting's text form (InputError naming the alias, the value and the
  // values it takes); null: the same text.
  std::function<std::string(const std::string& value)> translate;
  std::string note;  // how the value maps, for the docs table ("" : as it is)
};

struct SettingDecl {
  std::string name;  // as --print-config prints it and the checkpoint's config.json records it
  SettingGroup group;
  std::vector<std::string> flags;    // long flags, the first is the setting's flag ("" : none)
  std::vector<FlagAlias> aliases;    // other tools' flags for it (each its own option)
  // The DeepSpeed JSON / Accelerate YAML keys that set it, dotted from the file's top, ", "
  // between keys ("" : none); "[i]" names an element of a list key (optimizer.params.betas[0]).
  // config_resolve applies a file key to a setting only when its declaration names the key.
  std::string deepspeed;
  std::string accelerate;
  std::string help;                  // what it does, and its rule
  std::vector<std::string> choices;  // a closed set of values ({} : any value of its type)
  std::string type_name;             // INT, FLOAT, TEXT, BOOL: what --help says the value is
  bool is_switch = false;            // a flag without a value (it sets `switch_value`)
  std::string switch_value = "true";
  std::string empty_text = "(none)";  // what --print-config shows for an empty value
  bool builtin_model_only = false;    // sizes the built-in model: not printed with --model
  bool print_when_given = false;      // --print-config shows it only when a flag gave it (a conversion)
  unsigned commands = kTrainCommand;
  ResumeRule resume = ResumeRule::kFree;
  // The default by source (in the setting's text form); unset: TrainConfig's own, whatever the source.
  std::optional<std::string> demo_default, hf_default, ds_default;
  // The rule every value must satisfy, whatever set it (flag, file, checkpoint): numeric settings.
  std::optional<NumberRule> rule;
  std::function<double(const TrainConfig&)> number;  // the value as a number (numeric settings only)
  // Typed access through the setting's text form: the value as --print-config shows it, set from
  // a command-line value (InputError naming the flag, the value and the rule), and JSON.
  std::function<std::string(const TrainConfig&)> get;
  std::function<void(TrainConfig&, const std::string& value, const std::string& flag)> set;
  std::function<nlohmann::json(const TrainConfig&)> to_json;
  std::function<void(TrainConfig&, const nlohmann::json&)> from_json;

  const std::optional<std::string>& default_for(DefaultsSource source) const;
  // `deepspeed` / `accelerate` one key each.
  std::vector<std::string> deepspeed_keys() const;
  std::vector<std::string> accelerate_keys() const;
  const std::string& flag() const { return flags.front(); }
  bool has_flag() const { return !flags.empty() && !flags.front().empty(); }
  // Every flag and alias of the setting found in `given` (long names, as the command line gave them).
  std::vector<std::string> flags_given(const std::set<std::string>& given) const;
};

// A flag of another tool with no seqpar setting behind it (Megatron-DeepSpeed's
// --tensor-model-parallel-size, --sequence-parallel, --fp16): `seqpar train` takes it so that a
// migrated command line gets a reason instead of "unknown option". Refused: an InputError naming
// the flag, its value and the reason, unless the value is `accepted` (e.g. a parallel degree of 1).
// Not refused: accepted, and the reason is printed once as a note (what seqpar does instead).
struct ForeignFlag {
  std::string flag;
  std::string tool;
  bool takes_value = false;
  std::string accepted;  // with takes_value: the one value accepted silently ("" : none)
  bool refused = true;
  std::string reason;
  // config_resolve checks the value against the settings (the decay lengths: accepted when they
  // equal the run's), instead of refusing or noting it.
  bool checked = false;
};
const std::vector<ForeignFlag>& foreign_flags();

// Every user setting of a training run, in print order.
const std::vector<SettingDecl>& train_settings();
// The non-finite guard's settings (on_nonfinite, max_nonfinite_steps): InputError naming the
// setting, the value and the rule.
void validate_nonfinite_settings(const TrainConfig& config);
// The declaration of a setting by name; nullptr when there is none.
const SettingDecl* find_setting(const std::string& name);
// Every setting's value as JSON ({name: value}), and back (unknown names are an InputError).
nlohmann::json settings_to_json(const TrainConfig& config);
void settings_from_json(TrainConfig& config, const nlohmann::json& j);
// Sets every setting with a default for `source` to it (a run's defaults before flags and files).
void apply_defaults(TrainConfig& config, DefaultsSource source);
// Each declared rule on the config's values; a broken one adds "setting=value must be RULE", with
// the value's source when `source_of` names it ("" : not named).
// `model_sizes`: also the built-in model's sizes (a run without --model).
void check_setting_rules(const TrainConfig& config, Problems& problems,
                         const std::function<std::string(const std::string& name)>& source_of = nullptr,
                         bool model_sizes = true);
// The docs table (docs/configs.md): one Markdown row per setting, with its group, flags, keys,
// default (from `defaults`) and help.
std::string settings_markdown_table(const TrainConfig& defaults);

}  // namespace seqpar
