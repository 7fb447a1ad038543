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

// Checks that `tensors` (from headers or read tensors) hold every parameter of `config` with its
// HF shape and a floating dtype: InputError "<source>: parameter '<name>' ..." otherwise; warns of
// tensors it does not use. Allocates nothing of the model's size.
void check_params_in(const LlamaConfig& config, const std::vector<TensorInfo>& tensors, const std::string& source);

// The weights in `data` as host tensors of `dtype` (converted), checked (check_params_in) before
// they are allocated: the trainer's initial weights.
LlamaParams params_from_tensors(const LlamaConfig& config, const SafetensorsData& data, const std::string& source,
                               DType dtype);
// The model of `config` with the weights in `data`, checked (check_params_in) before the model is
// allocated: a config far beyond its checkpoint's tensors fails without allocating its model.
std::unique_ptr<LlamaModel> model_from_tensors(const LlamaConfig& config, const SafetensorsData& data,
                                               const std::string& source, Device device = Device::cpu());

}  // namespace seqpar
