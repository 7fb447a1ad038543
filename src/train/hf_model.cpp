#include "train/hf_model.h"

#include <set>

#include "core/log.h"
#include "io/hf_config.h"
#include "io/safetensors.h"

namespace seqpar {

void load_params_from(LlamaParams& params, const LlamaConfig& config, const SafetensorsData& data,
                      const std::string& source) {
  auto expected = LlamaParams::shapes(config);
  // Validate everything before touching the model, so a bad checkpoint never half-loads.
  for (auto& [name, shape] : expected) {
    const Tensor* t = data.find(name);
    SEQPAR_INPUT_CHECK(t != nullptr, "{}: parameter '{}' is missing from the checkpoint", source, name);
    SEQPAR_INPUT_CHECK(t->shape() == shape, "{}: parameter '{}' has shape {}, but config.json implies {}", source, name,
                       shape_str(t->shape()), shape_str(shape));
    SEQPAR_INPUT_CHECK(t->dtype() == DType::kF32 || t->dtype() == DType::kBF16,
                       "{}: parameter '{}' has dtype {}; weights must be floating point", source, name,
                       dtype_name(t->dtype()));
  }
  std::set<std::string> known;
  for (auto& [name, shape] : expected) known.insert(name);
  for (auto& [name, t] : data.tensors) {
    if (known.count(name)) continue;
    if (name == "lm_head.weight" && config.tie_word_embeddings) {
      log_warn("{}: ignoring 'lm_head.weight': tie_word_embeddings=true, the LM head is model.embed_tokens.weight",
               source);
    } else if (name.find("rotary_emb.inv_freq") == std::string::npos) {
      log_warn("{}: ignoring unexpected tensor '{}'", source, name);
    }
  }
  for (auto& [name, dst] : params.named()) {
    const Tensor& src = data.at(name);
    Tensor f32 = src.dtype() == dst->dtype() ? src : src.to_dtype(dst->dtype());
    dst->copy_from(f32);
  }
}

std::unique_ptr<LlamaModel> load_hf_model(const std::string& dir, Device device) {
  LlamaConfig config = load_hf_llama_config(dir);
  SafetensorsData data = read_hf_checkpoint(dir);
  auto model = std::make_unique<LlamaModel>(config, device);
  load_params_from(model->params(), config, data, dir);
  return model;
}

}  // namespace seqpar
