// One training configuration from four layers, each overriding the one before:
//   defaults < DeepSpeed JSON (--config / --deepspeed) < Accelerate YAML (--accelerate-config)
//            < command-line flags
// remembering where every value came from (`seqpar train --print-config` prints it). "auto"
// values in the DeepSpeed file take the trainer's value (flag or default), as the Hugging Face
// Trainer fills them. Cross-setting rules are checked here, with the numbers and their sources:
// the batch arithmetic (train_batch_size = micro × grad_accum × dp_world, dp_world = world / sp),
// the world size (dp_replicate × dp_shard × sp = num_processes), Adam's mode against weight decay.
// Also the learning-rate schedules (DeepSpeed's, computed as DeepSpeed computes them).
// docs/configs.md is the user's guide to all of it.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "io/accelerate_config.h"
#include "io/ds_config.h"
#include "train/trainer.h"

namespace seqpar {

// The precedence of a value's source, lowest first.
// kEnvironment: what `accelerate launch` exported (ACCELERATE_*, PARALLELISM_CONFIG_*, FSDP_*): the
// launcher's resolution of its YAML and its own flags, so it overrides the YAML, as Accelerate's
// plugins read the environment when their script passes nothing explicit (cli/accelerate_env.h).
enum class ConfigLayer { kDefault = 0, kDeepSpeed = 1, kAccelerate = 2, kEnvironment = 3, kFlag = 4 };

// Settings from the config files that have no TrainConfig field: the optimizer's name and mode
// (checked here), and what is recorded without being acted on yet (precision,
// communication dtype, launch topology): printed, and there for the parts to come. (The precision
// is a setting of its own: mixed_precision, train/config.h.)
struct RecordedSettings {
  std::string optimizer = "AdamW";  // as the config names it (DeepSpeed's Adam in adam_w_mode is AdamW)
  bool adam_w_mode = true;          // false only for DeepSpeed's Adam with adam_w_mode false (needs weight_decay 0)
  std::string sp_comm_dtype = "fp32";  // seq_parallel_communication_data_type
  bool wall_clock_breakdown = false;
  bool seq_length_is_variable = true;        // parallelism_config_sp_seq_length_is_variable (Accelerate's default)
  std::string distributed_type = "NO";
  int64_t num_processes = 0;  // 0: not given (the world is sp × dp_replicate × dp_shard)
  int64_t num_machines = 1;
  int64_t machine_rank = 0;
  std::string main_process_ip;
  int64_t main_process_port = 0;  // 0: not given
};

// One printed line: the setting, its value, and where the value came from.
struct ResolvedSetting {
  std::string name, value, source;
};

struct ResolvedConfig {
  TrainConfig train;
  DefaultsSource defaults = DefaultsSource::kDemo;  // whose defaults the run got (config.h)
  RecordedSettings recorded;
  int64_t train_batch_size = 0;           // micro_batch × grad_accum × dp_world
  int world = 0;                          // sp × dp_replicate × dp_shard
  std::vector<ResolvedSetting> settings;  // every setting, in print order
  std::vector<std::string> warnings;      // from the files and from the merge, each a full sentence

  // The source / value text of a setting by name ("" when there is no such setting).
  std::string source_of(const std::string& name) const;
  std::string value_of(const std::string& name) const;
};

// The command line: the command's defaults with the given flags applied, and the flags given
// (their long names, "--lr"). A flag's value wins over every file.
struct CommandLine {
  TrainConfig values;
  std::set<std::string> given;
  // true (the commands): what no flag gave starts at the defaults of the run's source
  // (defaults_source). false: `values` are complete as they are (a caller that built its own
  // TrainConfig, such as the resolution tests of files against TrainConfig{}); sources read "default".
  bool source_defaults = true;
  // When a launcher started this process as one rank of several over NCCL: its world size (the
  // environment's WORLD_SIZE, SLURM_NTASKS, ...) and where it came from, for messages. The world
  // must equal it, and dp_replicate left at its default fills it (as DeepSpeed's dp = world / sp);
  // an Accelerate num_processes must agree. 0: not launched (the world is whatever the mesh says).
  int launch_world = 0;
  std::string launch_source;
};

// Whose defaults a run with these inputs gets: the demo's with no model, data or file; DeepSpeed's
// for a DeepSpeed file without "auto" (and no Accelerate config); HF Trainer's otherwise.
DefaultsSource defaults_source(const CommandLine& cli, const DsConfig* ds, const AccelerateConfig* acc,
                               const AccelerateConfig* env = nullptr);

// Merges the layers; `ds` / `acc` / `env` (the environment accelerate launch set) may be null.
// Every inconsistency and every broken rule of a setting (with its source) is found in one pass:
// added to `problems` when given, else thrown as one InputError.
ResolvedConfig resolve_train_config(const CommandLine& cli, const DsConfig* ds, const AccelerateConfig* acc,
                                    const AccelerateConfig* env = nullptr, Problems* problems = nullptr);
// Same, loading the files ("" = none). A DeepSpeed file named both by --deepspeed and by the
// YAML's deepspeed_config_file must be the same file.
ResolvedConfig resolve_train_config(const CommandLine& cli, const std::string& deepspeed_path,
                                    const std::string& accelerate_path, const AccelerateConfig* env = nullptr,
                                    Problems* problems = nullptr);

// Appends each validate() problem that names a setting ("name=value ...") with that value's source.
void add_sources(Problems& problems, const ResolvedConfig& config);

// One line per setting: name, value, source; then the warnings.
std::string format_resolved_config(const ResolvedConfig& config);

// The complete schedule of a config: its lr_schedule, with the kLinearCosine parameters (and
// WarmupCosineLR's base lr) taken from the config's lr, warmup_steps, min_lr_ratio and steps.
LrSchedule lr_schedule_of(const TrainConfig& config);

// The learning rate of optimizer step `step` (1-based).
//   kLinearCosine: lr × step / warmup_steps up to warmup_steps, then cosine from lr to
//     lr × min_lr_ratio at total_steps.
//   DeepSpeed's types: the engine steps its scheduler after each optimizer step, and the
//     constructor sets the first lr, so step k trains with the lr at last_batch_iteration = k - 2
//     (-1 for step 1: warmup_min_lr for WarmupLR / WarmupDecayLR, 0 for WarmupCosineLR). With
//     W = max(2, warmup_num_steps), T = total_num_steps, i = k - 2 >= 0:
//     warmup gamma(i) = log(i + 1) / log(W) (log) or i / W (linear), for i < W;
//     WarmupLR:       min_lr + (max_lr - min_lr) × (gamma(i) if i < W else 1)
//     WarmupDecayLR:  min_lr + (max_lr - min_lr) × (gamma(i) if i < W else max(0, (T - i) / max(1, T - W)))
//     WarmupCosineLR: base_lr × r, r = warmup_min_ratio + (1 - warmup_min_ratio) × gamma(i) for i < W, else
//                     max(0, cos_min_ratio + (1 - cos_min_ratio) × (1 + cos(pi × min(1, (i - W + 1) / max(1, T - W))))
//                     / 2)
float scheduled_lr(const LrSchedule& schedule, int64_t step);

}  // namespace seqpar
