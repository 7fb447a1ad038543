// accelerate launch's environment as an Accelerate config (accelerate_env.h).
#include "cli/accelerate_env.h"

#include <cctype>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace seqpar {

namespace {

// A variable and the YAML key (section, key) Accelerate's config file uses for the same setting.
struct EnvKey {
  const char* var;
  const char* section;  // "" : top level
  const char* key;
};

const EnvKey kKeys[] = {
    {"ACCELERATE_MIXED_PRECISION", "", "mixed_precision"},
    {"ACCELERATE_DEEPSPEED_CONFIG_FILE", "deepspeed_config", "deepspeed_config_file"},
    {"ACCELERATE_DEEPSPEED_ZERO_STAGE", "deepspeed_config", "zero_stage"},
    {"ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "deepspeed_config", "gradient_accumulation_steps"},
    {"ACCELERATE_GRADIENT_CLIPPING", "deepspeed_config", "gradient_clipping"},
    {"ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE", "deepspeed_config", "offload_optimizer_device"},
    {"ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE", "deepspeed_config", "offload_param_device"},
    {"ACCELERATE_DEEPSPEED_ZERO3_INIT", "deepspeed_config", "zero3_init_flag"},
    {"ACCELERATE_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL", "deepspeed_config", "zero3_save_16bit_model"},
    {"FSDP_VERSION", "fsdp_config", "fsdp_version"},
    {"FSDP_SHARDING_STRATEGY", "fsdp_config", "fsdp_sharding_strategy"},
    {"FSDP_RESHARD_AFTER_FORWARD", "fsdp_config", "fsdp_reshard_after_forward"},
    {"FSDP_OFFLOAD_PARAMS", "fsdp_config", "fsdp_offload_params"},
    {"FSDP_ACTIVATION_CHECKPOINTING", "fsdp_config", "fsdp_activation_checkpointing"},
    {"FSDP_STATE_DICT_TYPE", "fsdp_config", "fsdp_state_dict_type"},
    {"FSDP_CPU_RAM_EFFICIENT_LOADING", "fsdp_config", "fsdp_cpu_ram_efficient_loading"},
    {"FSDP_SYNC_MODULE_STATES", "fsdp_config", "fsdp_sync_module_states"},
    {"FSDP_AUTO_WRAP_POLICY", "fsdp_config", "fsdp_auto_wrap_policy"},
    {"FSDP_TRANSFORMER_CLS_TO_WRAP", "fsdp_config", "fsdp_transformer_layer_cls_to_wrap"},
    {"FSDP_MIN_NUM_PARAMS", "fsdp_config", "fsdp_min_num_params"},
    {"FSDP_BACKWARD_PREFETCH", "fsdp_config", "fsdp_backward_prefetch"},
    {"FSDP_FORWARD_PREFETCH", "fsdp_config", "fsdp_forward_prefetch"},
    {"FSDP_USE_ORIG_PARAMS", "fsdp_config", "fsdp_use_orig_params"},
    {"PARALLELISM_CONFIG_DP_REPLICATE_SIZE", "parallelism_config", "parallelism_config_dp_replicate_size"},
    {"PARALLELISM_CONFIG_DP_SHARD_SIZE", "parallelism_config", "parallelism_config_dp_shard_size"},
    {"PARALLELISM_CONFIG_TP_SIZE", "parallelism_config", "parallelism_config_tp_size"},
    {"PARALLELISM_CONFIG_CP_SIZE", "parallelism_config", "parallelism_config_cp_size"},
    {"PARALLELISM_CONFIG_CP_BACKEND", "parallelism_config", "parallelism_config_cp_backend"},
    {"PARALLELISM_CONFIG_CP_COMM_STRATEGY", "parallelism_config", "parallelism_config_cp_comm_strategy"},
    {"PARALLELISM_CONFIG_SP_SIZE", "parallelism_config", "parallelism_config_sp_size"},
    {"PARALLELISM_CONFIG_SP_BACKEND", "parallelism_config", "parallelism_config_sp_backend"},
};

// A value as YAML: plain when it is a word or a number (so "2" is an integer and "true" a bool, as
// Accelerate's int() / str-to-bool read them), else a quoted string.
std::string yaml_scalar(const std::string& v) {
  bool plain = !v.empty();
  for (char ch : v)
    plain = plain && (std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '.' || ch == '-' || ch == '/');
  return plain ? v : nlohmann::json(v).dump();
}

bool is_true(const std::optional<std::string>& v) { return v && (*v == "true" || *v == "True" || *v == "1"); }

}  // namespace

std::string accelerate_env_yaml(const EnvLookup& env) {
  std::string top, sections;
  for (const char* section : {"", "deepspeed_config", "fsdp_config", "parallelism_config"}) {
    std::string body;
    for (const EnvKey& k : kKeys) {
      if (std::string(k.section) != section) continue;
      if (std::optional<std::string> v = env(k.var))
        body += fmt::format("{}{}: {}\n", *section ? "  " : "", k.key, yaml_scalar(*v));
    }
    if (body.empty()) continue;
    if (*section)
      sections += std::string(section) + ":\n" + body;
    else
      top += body;
  }
  if (top.empty() && sections.empty()) return "";
  // Accelerate's own switches say which plugin the script gets.
  if (is_true(env("ACCELERATE_USE_DEEPSPEED")))
    top += "distributed_type: DEEPSPEED\n";
  else if (is_true(env("ACCELERATE_USE_FSDP")))
    top += "distributed_type: FSDP\n";
  return top + sections;
}

std::optional<AccelerateConfig> accelerate_config_from_env(const EnvLookup& env, Problems& problems) {
  const std::string yaml = accelerate_env_yaml(env);
  if (yaml.empty()) return std::nullopt;
  return parse_accelerate_config(yaml, kAccelerateEnvSource, ".", &problems);
}

}  // namespace seqpar
