// DeepSpeed JSON config (`ds_config.json`): the keys seqpar reads, parsed and validated into a plain
// struct. Merging with the command line and the Accelerate YAML is train/config_resolve's job;
// this part only says what the file says (absent, "auto", or a value) and rejects what seqpar
// cannot honour. docs/configs.md lists every key and its effect.
//
// Errors (InputError) name the file, the dotted key, the expected type and the value found, or
// the reason a setting is refused (NVMe offload, L2-mode Adam, ...). Keys seqpar does not
// read, and settings it reads without acting on them (the stage-3 tuning knobs), become warnings.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace seqpar {

class Problems;  // core/error.h

// One DeepSpeed setting: absent from the file, "auto" (filled from the trainer's own value, as
// the Hugging Face Trainer does), or set to a value.
template <typename T>
struct DsValue {
  enum class State { kAbsent, kAuto, kSet };
  State state = State::kAbsent;
  T value{};
  std::string key;  // dotted path in the file ("optimizer.params.lr"), for messages and provenance

  bool absent() const { return state == State::kAbsent; }
  bool is_auto() const { return state == State::kAuto; }
  bool is_set() const { return state == State::kSet; }
};

struct DsOptimizer {
  bool present = false;
  // "AdamW" or "Adam" (DeepSpeed compares names case-insensitively). DeepSpeed's Adam runs in
  // adam_w_mode by default, i.e. it *is* AdamW (decoupled weight decay); with adam_w_mode=false it
  // is L2-regularised Adam, accepted only with weight_decay 0, where the two coincide.
  std::string type;
  bool adam_w_mode = true;
  DsValue<double> lr, eps, weight_decay;
  DsValue<std::array<double, 2>> betas;
};

struct DsScheduler {
  bool present = false;
  std::string type;  // "WarmupLR" | "WarmupDecayLR" | "WarmupCosineLR"
  // Each is accepted only for the types whose DeepSpeed constructor takes it (a key another type
  // takes is an error, as it is a TypeError in DeepSpeed).
  DsValue<double> warmup_min_lr, warmup_max_lr;     // WarmupLR, WarmupDecayLR
  DsValue<int64_t> warmup_num_steps;                // all three
  DsValue<std::string> warmup_type;                 // all three: "log" | "linear"
  DsValue<int64_t> total_num_steps;                 // WarmupDecayLR, WarmupCosineLR (required there)
  DsValue<double> warmup_min_ratio, cos_min_ratio;  // WarmupCosineLR
};

struct DsConfig {
  std::string source;  // the path (or name) the text came from, as given
  // False when the text is not a DeepSpeed JSON object (a problem says why): nothing was read, and
  // no rule of DeepSpeed's applies to it.
  bool readable = true;

  DsValue<int64_t> train_batch_size, train_micro_batch_size_per_gpu, gradient_accumulation_steps;
  DsValue<int64_t> sequence_parallel_size;
  DsValue<int64_t> zero_stage;  // zero_optimization.stage, 0..3
  // zero_optimization.offload_optimizer / offload_param: device "none" | "cpu" ("nvme" is refused),
  // the parameters' pin_memory (the optimizer's is read and explained: its state is never copied by
  // DMA, only the staging is, which is always pinned).
  DsValue<std::string> offload_optimizer_device, offload_param_device;
  DsValue<bool> offload_param_pin_memory;
  DsValue<bool> bf16_enabled;   // bf16.enabled (or the older "bfloat16")
  // fp16.enabled and DeepSpeed's loss scaler (train/loss_scaler.h). Both fp16 and bf16 enabled is
  // an error naming both keys; fp16.fp16_master_weights_and_grads=true is refused, auto_cast=true noted.
  DsValue<bool> fp16_enabled;
  DsValue<double> loss_scale, min_loss_scale;
  DsValue<int64_t> initial_scale_power, loss_scale_window, hysteresis;
  DsValue<bool> consecutive_hysteresis;
  DsOptimizer optimizer;
  DsScheduler scheduler;
  DsValue<double> gradient_clipping;
  DsValue<int64_t> steps_per_print;
  DsValue<bool> wall_clock_breakdown;
  DsValue<std::string> seq_parallel_communication_data_type;  // "fp32" | "bf16" (recorded)

  bool uses_auto = false;  // some value is "auto": a file written for HF Trainer / Accelerate to fill
  std::vector<std::string> warnings;  // each a full sentence naming the file and the key(s)
};

// Reads and parses `path`. Every problem of the file (a wrong type or value, a key given twice, a
// file that is not a DeepSpeed config) is found in one pass: added to `problems` when given (the
// caller reports them with its own), else thrown as one InputError.
DsConfig load_ds_config(const std::string& path, Problems* problems = nullptr);
// Parses JSON text; `source` names it in messages and provenance.
DsConfig parse_ds_config(const std::string& json_text, const std::string& source, Problems* problems = nullptr);

}  // namespace seqpar
