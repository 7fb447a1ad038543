// Telling DeepSpeed JSON, Accelerate YAML, ArcticTraining recipes and HF config.json apart by their
// top-level keys (config_kind.h).
#include "io/config_kind.h"

#include <algorithm>
#include <set>

#include <fmt/format.h>

namespace seqpar {

namespace {

// Top-level keys of each format (DeepSpeed's docs/config-json, Accelerate's ClusterConfig fields,
// ArcticTraining's TrainerConfig, transformers' PretrainedConfig).
const std::set<std::string> kDeepSpeedKeys = {
    "train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "optimizer", "scheduler",
    "fp16", "bf16", "bfloat16", "zero_optimization", "gradient_clipping", "steps_per_print", "wall_clock_breakdown",
    "activation_checkpointing", "sequence_parallel_size", "prescale_gradients", "zero_allow_untested_optimizer",
    "tensor_parallel", "communication_data_type", "seq_parallel_communication_data_type", "flops_profiler",
    "tensorboard", "wandb", "csv_monitor", "comms_logger", "amp", "aio", "elasticity", "data_efficiency",
    "curriculum_learning", "compression_training", "gradient_predivide_factor", "memory_breakdown", "pipeline",
    "checkpoint", "data_types", "zero_force_ds_cpu_optimizer", "dump_state", "sparse_gradients", "autotuning"};
const std::set<std::string> kAccelerateKeys = {
    "compute_environment", "distributed_type", "num_processes", "num_machines", "machine_rank", "main_process_ip",
    "main_process_port", "mixed_precision", "deepspeed_config", "fsdp_config", "parallelism_config",
    "main_training_function", "rdzv_backend", "same_network", "use_cpu", "downcast_bf16", "gpu_ids",
    "dynamo_config", "megatron_lm_config", "fp8_config", "ipex_config", "mpirun_config", "tpu_env", "tpu_name",
    "tpu_zone", "tpu_use_cluster", "tpu_use_sudo", "enable_cpu_affinity", "debug", "commands", "command_file"};
const std::set<std::string> kArcticTypes = {"causal_lm", "sft", "dpo", "speculator", "mlp_speculator",
                                            "arctic_lstm_speculator"};
const std::set<std::string> kArcticKeys = {"model", "data", "deepspeed", "sequence_parallel_size", "micro_batch_size",
                                           "activation_checkpoint_cpu_offload", "tiled_mlp_compute", "train_iters"};

int count_in(const ConfigKeys& k, const std::set<std::string>& set) {
  return static_cast<int>(std::count_if(k.keys.begin(), k.keys.end(), [&](const std::string& s) { return set.count(s); }));
}

std::string some_keys(const ConfigKeys& k, const std::set<std::string>& set) {
  std::string out;
  int n = 0;
  for (const std::string& s : k.keys)
    if (set.count(s) && n++ < 3) out += (out.empty() ? "" : ", ") + s;
  return out;
}

}  // namespace

ConfigKind config_kind_of(const ConfigKeys& k) {
  auto type = k.scalars.find("type");
  if (type != k.scalars.end() && kArcticTypes.count(type->second) && count_in(k, kArcticKeys) > 0)
    return ConfigKind::kArcticTraining;
  if (std::find(k.keys.begin(), k.keys.end(), "model_type") != k.keys.end() ||
      std::find(k.keys.begin(), k.keys.end(), "architectures") != k.keys.end())
    return ConfigKind::kHfModelConfig;
  const int ds = count_in(k, kDeepSpeedKeys), acc = count_in(k, kAccelerateKeys);
  if (ds == 0 && acc == 0) return ConfigKind::kUnknown;
  return acc > ds ? ConfigKind::kAccelerate : ConfigKind::kDeepSpeed;
}

std::string config_kind_advice(ConfigKind kind, const ConfigKeys& k) {
  switch (kind) {
    case ConfigKind::kDeepSpeed:
      return fmt::format("it looks like a DeepSpeed JSON config ({}): give it with --deepspeed (or --config)",
                         some_keys(k, kDeepSpeedKeys));
    case ConfigKind::kAccelerate:
      return fmt::format("it looks like an Accelerate config ({}): give it with --accelerate-config",
                         some_keys(k, kAccelerateKeys));
    case ConfigKind::kArcticTraining:
      return arctic_recipe_advice(k);
    case ConfigKind::kHfModelConfig:
      return "it looks like a model's config.json (model_type / architectures): give its directory with --model";
    case ConfigKind::kUnknown:
      break;
  }
  std::string keys;
  for (size_t i = 0; i < k.keys.size() && i < 5; ++i) keys += (keys.empty() ? "" : ", ") + k.keys[i];
  return fmt::format("none of its top-level keys ({}{}) belongs to a DeepSpeed, Accelerate or ArcticTraining config",
                     keys.empty() ? "none" : keys, k.keys.size() > 5 ? ", ..." : "");
}

std::string arctic_recipe_advice(const ConfigKeys& k) {
  // Where each recipe key goes in seqpar (docs/configs.md, "ArcticTraining recipes").
  static const std::map<std::string, std::string> kFlag = {
      {"type", "seqpar trains causal LMs (causal_lm / sft data through prepare-data)"},
      {"micro_batch_size", "--micro-batch"},
      {"sequence_parallel_size", "--sp"},
      {"activation_checkpoint_cpu_offload", "--activation-checkpointing --checkpoint-offload"},
      {"tiled_mlp_compute", "--tiled-mlp-tokens N"},
      {"deepspeed", "its content as a DeepSpeed JSON file, --deepspeed FILE"},
      {"model", "--model DIR (name_or_path, downloaded), --attn-implementation"},
      {"data", "`seqpar prepare-data` then --data FILE; max_length: --seq-len"},
      {"optimizer", "--lr, --beta1, --beta2, --eps, --weight-decay"},
      {"scheduler", "--lr-schedule, --warmup-steps"},
      {"gradient_accumulation_steps", "--grad-accum"},
      {"seed", "--seed"},
      {"epochs", "--steps"},
      {"train_iters", "--steps"},
      {"exit_iteration", "--stop-at-step"},
      {"checkpoint", "--save-dir, --save-every"},
      {"logger", "--log-every, --metrics-out"},
      {"wandb", "--metrics-out"},
  };
  std::string out =
      "it is an ArcticTraining recipe (type: " + k.scalars.at("type") +
      "), which seqpar does not read; its keys map onto seqpar's flags:";
  for (const std::string& key : k.keys) {
    auto it = kFlag.find(key);
    out += fmt::format(" {} -> {};", key, it != kFlag.end() ? it->second : "no seqpar equivalent");
  }
  out.pop_back();
  return out;
}

}  // namespace seqpar
