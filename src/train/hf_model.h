// Hugging Face model directories in and out: config.json + safetensors <-> LlamaModel.
//
// The tensors' names: inside seqpar every family uses LlamaParams' names (model/llama.h). The
// Llama-style families' HF checkpoints use the same names; GPT-2's (GPT2LMHeadModel) are mapped
// here, on load and on the way out (export, `seqpar fwdbwd`'s gradients and parameters):
//   transformer.wte.weight [V, C]             model.embed_tokens.weight (the tied LM head too)
//   transformer.wpe.weight [P, C]             model.embed_positions.weight
//   transformer.h.{l}.ln_1.{weight,bias}      model.layers.{l}.input_layernorm.{weight,bias}
//   transformer.h.{l}.attn.c_attn.weight [C, 3C], .bias [3C]
//                                             q_proj/k_proj/v_proj .weight (each [C, C]) and .bias:
//                                             Conv1D stores [in, out], so W_q = c_attn.weight[:, 0:C]^T
//   transformer.h.{l}.attn.c_proj.{weight [C, C],bias}   self_attn.o_proj (transposed)
//   transformer.h.{l}.ln_2.{weight,bias}      post_attention_layernorm
//   transformer.h.{l}.mlp.c_fc.{weight [C, F],bias}      mlp.up_proj (transposed)
//   transformer.h.{l}.mlp.c_proj.{weight [F, C],bias}    mlp.down_proj (transposed)
//   transformer.ln_f.{weight,bias}            model.norm.{weight,bias}
// A checkpoint saved from GPT2Model (names without "transformer.", as the original OpenAI
// checkpoints are) loads too; the attention-mask buffers some carry (attn.bias, attn.masked_bias)
// are ignored.
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

// The parameters as a Hugging Face checkpoint of `config` names and shapes them, in HF's
// named_parameters() order: LlamaParams::shapes for the Llama-style families, GPT-2's for gpt2.
std::vector<std::pair<std::string, Shape>> hf_checkpoint_shapes(const LlamaConfig& config);

// seqpar's named tensors of `config` (LlamaParams names, e.g. from named(); any device and float
// dtype) -> HF's names and layout (fused c_attn, Conv1D [in, out]), f32 host tensors, in
// hf_checkpoint_shapes order. The Llama-style families: the same tensors in f32 on the host.
std::vector<std::pair<std::string, Tensor>> to_hf_tensors(
    const LlamaConfig& config, const std::vector<std::pair<std::string, const Tensor*>>& named);

// A HF checkpoint's tensors (checked against hf_checkpoint_shapes first) -> seqpar's names (gpt2:
// split, transposed, f32); the Llama-style families' are returned as they are.
SafetensorsData from_hf_tensors(const LlamaConfig& config, SafetensorsData hf, const std::string& source);

// Copies named tensors (seqpar's names) into params, validating presence and shape. `source` names the
// origin in messages.
void load_params_from(LlamaParams& params, const LlamaConfig& config, const SafetensorsData& data,
                      const std::string& source);

// Checks that `tensors` (from headers or read tensors) hold every parameter of `config` with its
// HF shape and a floating dtype: InputError "<source>: parameter '<name>' ..." otherwise; warns of
// tensors it does not use. Allocates nothing of the model's size.
void check_params_in(const LlamaConfig& config, const std::vector<TensorInfo>& tensors, const std::string& source);

// The weights of the HF directory `dir` (its config already read as `config`; GPT-2's names and
// Conv1D layout mapped) as host tensors of `dtype`, checked before anything is allocated: the
// trainer's initial weights.
LlamaParams load_hf_params(const std::string& dir, const LlamaConfig& config, DType dtype);
// The weights in `data` as host tensors of `dtype` (converted), checked (check_params_in) before
// they are allocated: the trainer's initial weights.
LlamaParams params_from_tensors(const LlamaConfig& config, const SafetensorsData& data, const std::string& source,
                               DType dtype);
// The model of `config` with the weights in `data`, checked (check_params_in) before the model is
// allocated: a config far beyond its checkpoint's tensors fails without allocating its model.
std::unique_ptr<LlamaModel> model_from_tensors(const LlamaConfig& config, const SafetensorsData& data,
                                               const std::string& source, Device device = Device::cpu());

}  // namespace seqpar
