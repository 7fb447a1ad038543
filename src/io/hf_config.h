// HF config.json for the Llama family (llama, qwen2, qwen3, mistral: arch/llama_config.h),
// transformers 4.x and 5.x spellings.
#pragma once

#include <string>

#include "arch/llama_config.h"

namespace seqpar {

// Reads `path` (a config.json, or a directory holding one). Every missing required field,
// wrong type or unsupported value is an InputError naming the file, the field and the rule.
LlamaConfig load_hf_llama_config(const std::string& path);
LlamaConfig parse_hf_llama_config(const std::string& json_text, const std::string& source_name);

// config.json text for a LlamaConfig (transformers 5.x spelling, loadable by 4.x too).
std::string hf_llama_config_json(const LlamaConfig& config, const std::string& torch_dtype = "float32");

}  // namespace seqpar
