// Accelerate YAML config (`accelerate config` / `accelerate launch --config_file`): the launch
// settings, the DeepSpeed plugin section and `parallelism_config` (ALST / DeepSpeed-Ulysses),
// parsed and validated into a plain struct. Merging is train/config_resolve's job; the world-size
// rule (dp_replicate × dp_shard × sp == num_processes) is checked there, after the command line
// had its say. docs/configs.md lists every key.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "io/ds_config.h"

namespace seqpar {

// One YAML setting: present or not, and its dotted key in the file (for messages and provenance).
template <typename T>
struct YamlValue {
  std::optional<T> value;
  std::string key;

  bool has() const { return value.has_value(); }
  const T& operator*() const { return *value; }
};

struct AccelerateConfig {
  std::string source;  // the YAML path as given

  // Launch. num_processes is the total over all machines (Accelerate's meaning): seqpar's world.
  YamlValue<std::string> distributed_type;  // NO | MULTI_CPU | MULTI_GPU | DEEPSPEED | FSDP
  YamlValue<int64_t> num_processes, num_machines, machine_rank, main_process_port;
  YamlValue<std::string> main_process_ip;
  YamlValue<std::string> mixed_precision;  // no | bf16 | fp16 (fp8: an error)

  // deepspeed_config: either a file (deepspeed_config_file, relative to the YAML's directory,
  // loaded into `deepspeed`) or Accelerate's inline keys, not both (as Accelerate requires).
  std::string deepspeed_config_file;  // resolved path; "" = none
  std::optional<DsConfig> deepspeed;
  YamlValue<int64_t> zero_stage, gradient_accumulation_steps;
  YamlValue<double> gradient_clipping;
  YamlValue<std::string> seq_parallel_communication_data_type;  // fp32 | bf16
  YamlValue<std::string> offload_optimizer_device, offload_param_device;  // none | cpu (nvme refused)

  // parallelism_config (the `parallelism_config_` prefix of each key is kept in `key`).
  YamlValue<int64_t> sp_size, dp_replicate_size, dp_shard_size;
  YamlValue<std::string> sp_backend;  // "deepspeed" (the only backend seqpar implements)
  YamlValue<bool> sp_seq_length_is_variable;
  YamlValue<int64_t> sp_seq_length;
  YamlValue<std::string> sp_attn_implementation;  // sdpa | flash_attention_2 | flash_attention_3
  // parallelism_config_cp_size: PyTorch context parallelism, a ring over the sequence: seqpar's
  // ring degree (with sp_size > 1 as well: hybrid, Ulysses inside, ring across).
  YamlValue<int64_t> cp_size;

  // fsdp_config, mapped onto seqpar's levers: the sharding strategy (fsdp_sharding_strategy, or
  // FSDP2's fsdp_reshard_after_forward) as a ZeRO stage, fsdp_activation_checkpointing as
  // activation checkpointing. What has no seqpar counterpart is refused or warned by name.
  YamlValue<int64_t> fsdp_zero_stage;
  YamlValue<bool> fsdp_activation_checkpointing;

  std::vector<std::string> warnings;  // each a full sentence naming the file and the key(s)
};

// Reads `path`, and the DeepSpeed file it names (relative to the YAML's directory). The YAML is
// read as Accelerate reads it (yaml.safe_load: one document); a key given twice, a file that is not
// an Accelerate config (an ArcticTraining recipe, a DeepSpeed JSON, an unrelated YAML) and every
// bad value are problems, all found in one pass: added to `problems` when given, else thrown as
// one InputError.
AccelerateConfig load_accelerate_config(const std::string& path, Problems* problems = nullptr);
// Parses YAML text; `source` names it in messages; a deepspeed_config_file is resolved against
// `base_dir` and loaded.
AccelerateConfig parse_accelerate_config(const std::string& yaml_text, const std::string& source,
                                         const std::string& base_dir, Problems* problems = nullptr);

}  // namespace seqpar
