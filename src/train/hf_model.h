// Hugging Face model directories in and out: config.json + safetensors <-> LlamaModel.
#pragma once

#include <memory>
#include <string>

#include "io/safetensors.h"
#include "model/llama.h"

namespace seqpar {

// Reads DIR/config.json and the weights (model.safetensors or a sharded index), checks every
// parameter is present with its HF shape (bf16/f16/f32 weights are converted to the model's f32),
// and returns the model on `device`. Problems are InputErrors naming the directory, the tensor
// and the rule; nothing is loaded partially.
std::unique_ptr<LlamaModel> load_hf_model(const std::string& dir, Device device = Device::cpu());

// Copies named tensors (HF names) into params, validating presence and shape. `source` names the
// origin in messages.
void load_params_from(LlamaParams& params, const LlamaConfig& config, const SafetensorsData& data,
                      const std::string& source);

}  // namespace seqpar
