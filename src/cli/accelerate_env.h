// The environment `accelerate launch` sets for the script it starts (accelerate/utils/launch.py:
// ACCELERATE_MIXED_PRECISION, ACCELERATE_USE_DEEPSPEED and ACCELERATE_DEEPSPEED_* /
// ACCELERATE_GRADIENT_*, ACCELERATE_USE_FSDP and FSDP_*, PARALLELISM_CONFIG_*), read as one more
// Accelerate config layer. It is the launcher's resolution of its YAML and its own flags, so it
// overrides --accelerate-config and yields to seqpar's flags: Accelerate's plugins read these
// variables when the script passes nothing explicit. cli/ is the only reader of the environment
// besides comm/dist_env.cpp.
#pragma once

#include <optional>
#include <string>

#include "comm/dist_env.h"
#include "io/accelerate_config.h"

namespace seqpar {

// The name under which the environment's settings appear in --print-config and in messages.
inline constexpr const char* kAccelerateEnvSource = "environment (accelerate launch)";

// The YAML the variables amount to (the keys Accelerate's config file uses); "" when none is set.
std::string accelerate_env_yaml(const EnvLookup& env);
// That YAML parsed (problems added to `problems`); nullopt when no variable is set. A relative
// ACCELERATE_DEEPSPEED_CONFIG_FILE is taken from the working directory, as Accelerate does.
std::optional<AccelerateConfig> accelerate_config_from_env(const EnvLookup& env, Problems& problems);

}  // namespace seqpar
