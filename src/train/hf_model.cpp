#include "train/hf_model.h"

#include <set>

#include "core/log.h"
#include "io/hf_config.h"
#include "io/safetensors.h"

namespace seqpar {

void check_params_in(const LlamaConfig& config, const std::vector<TensorInfo>& tensors, const std::string& source) {
  // The config is validated (bounded sizes), so its list of parameters is bounded too.
  config.validate();
  std::map<std::string, const TensorInfo*> by_name;
  for (const TensorInfo& t : tensors) by_name.emplace(t.name, &t);
  const auto expected = LlamaParams::shapes(config);
  for (const auto& [name, shape] : expected) {
    auto it = by_name.find(name);
    SEQPAR_INPUT_CHECK(it != by_name.end(), "{}: parameter '{}' is missing from the checkpoint", source, name);
    const TensorInfo& t = *it->second;
    SEQPAR_INPUT_CHECK(t.shape == shape, "{}: parameter '{}' has shape {}, but config.json implies {}", source, name,
                       shape_str(t.shape), shape_str(shape));
    SEQPAR_INPUT_CHECK(t.dtype == DType::kF32 || t.dtype == DType::kBF16,
                       "{}: parameter '{}' has dtype {}; weights must be floating point", source, name,
                       dtype_name(t.dtype));
  }
  std::set<std::string> known;
  for (const auto& [name, shape] : expected) known.insert(name);
  for (const TensorInfo& t : tensors) {
    if (known.count(t.name)) continue;
    if (t.name == "lm_head.weight" && config.tie_word_embeddings) {
      log_warn("{}: ignoring 'lm_head.weight': tie_word_embeddings=true, the LM head is model.embed_tokens.weight",
               source);
    } else if (t.name.find("rotary_emb.inv_freq") == std::string::npos) {
      log_warn("{}: ignoring unexpected tensor '{}'", source, t.name);
    }
  }
}

namespace {

std::vector<TensorInfo> infos_of(const SafetensorsData& data) {
  std::vector<TensorInfo> out;
  out.reserve(data.tensors.size());
  for (const auto& [name, t] : data.tensors) out.push_back({name, t.shape(), t.dtype(), data.path});
  return out;
}

// Copies the checked tensors into params (converted to their dtype).
void copy_params(LlamaParams& params, const SafetensorsData& data) {
  for (auto& [name, dst] : params.named()) {
    const Tensor& src = data.at(name);
    Tensor converted = src.dtype() == dst->dtype() ? src : src.to_dtype(dst->dtype());
    dst->copy_from(converted);
  }
}

}  // namespace

void load_params_from(LlamaParams& params, const LlamaConfig& config, const SafetensorsData& data,
                      const std::string& source) {
  // Validate everything before touching the model, so a bad checkpoint never half-loads.
  check_params_in(config, infos_of(data), source);
  copy_params(params, data);
}

LlamaParams params_from_tensors(const LlamaConfig& config, const SafetensorsData& data, const std::string& source,
                               DType dtype) {
  check_params_in(config, infos_of(data), source);  // before the allocation
  LlamaParams params = LlamaParams::zeros(config, dtype, Device::cpu());
  copy_params(params, data);
  return params;
}

std::unique_ptr<LlamaModel> model_from_tensors(const LlamaConfig& config, const SafetensorsData& data,
                                               const std::string& source, Device device) {
  check_params_in(config, infos_of(data), source);  // before the model's allocation
  auto model = std::make_unique<LlamaModel>(config, device);
  copy_params(model->params(), data);
  return model;
}

std::unique_ptr<LlamaModel> load_hf_model(const std::string& dir, Device device) {
  // Order matters for bounded memory: the config and the headers are checked against each other
  // before a tensor is read or the model allocated (a config far beyond its tensors would
  // otherwise allocate its model first).
  const LlamaConfig config = load_hf_llama_config(dir);
  check_params_in(config, read_hf_checkpoint_headers(dir), dir);
  const SafetensorsData data = read_hf_checkpoint(dir);
  return model_from_tensors(config, data, dir, device);
}

}  // namespace seqpar
