// What kind of configuration file a file is, from its top-level keys: so a file given to the wrong
// flag (a YAML to --deepspeed, a DeepSpeed JSON to --accelerate-config, an ArcticTraining recipe,
// a model's config.json, an unrelated file) is refused saying what it looks like and which flag
// takes it, instead of running with every setting ignored.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace seqpar {

enum class ConfigKind { kUnknown, kDeepSpeed, kAccelerate, kArcticTraining, kHfModelConfig };

// The file's top-level keys and, for the scalar ones, their text (ArcticTraining's `type`).
struct ConfigKeys {
  std::vector<std::string> keys;
  std::map<std::string, std::string> scalars;
};

// The kind the keys say; kUnknown when none fits.
ConfigKind config_kind_of(const ConfigKeys& keys);
// "a DeepSpeed JSON config (train_batch_size, zero_optimization): give it with --deepspeed", ...
std::string config_kind_advice(ConfigKind kind, const ConfigKeys& keys);
// An ArcticTraining recipe's refusal: for every top-level key it has, the seqpar flag (or command)
// that carries it.
std::string arctic_recipe_advice(const ConfigKeys& keys);

}  // namespace seqpar
