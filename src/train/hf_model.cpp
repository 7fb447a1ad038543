#include "train/hf_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "core/log.h"
#include "io/hf_config.h"
#include "io/safetensors.h"

namespace seqpar {

namespace {

const char* const kGpt2Prefix = "transformer.";

bool is_gpt2(const LlamaConfig& c) { return c.family == ModelFamily::kGpt2; }

// The GPT-2 mask buffers older checkpoints carry (not parameters).
bool is_gpt2_buffer(const std::string& name) {
  return name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias");
}

// Checks `tensors` against `expected` (names, shapes, a floating dtype) and warns of the others.
void check_against(const LlamaConfig& config, const std::vector<std::pair<std::string, Shape>>& expected,
                   const std::vector<TensorInfo>& tensors, const std::string& source) {
  std::map<std::string, const TensorInfo*> by_name;
  for (const TensorInfo& t : tensors) by_name.emplace(t.name, &t);
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
      log_warn("{}: ignoring 'lm_head.weight': tie_word_embeddings=true, the LM head is {}", source,
               is_gpt2(config) ? "transformer.wte.weight" : "model.embed_tokens.weight");
    } else if (t.name.find("rotary_emb.inv_freq") == std::string::npos &&
               !(is_gpt2(config) && is_gpt2_buffer(t.name))) {
      log_warn("{}: ignoring unexpected tensor '{}'", source, t.name);
    }
  }
}

// A GPT2Model checkpoint (no "transformer." prefix): its names with the prefix.
template <typename Named>
void add_gpt2_prefix(std::vector<Named>& tensors, std::string Named::*name) {
  bool bare = false, prefixed = false;
  for (const Named& t : tensors) {
    bare |= t.*name == "wte.weight";
    prefixed |= t.*name == std::string(kGpt2Prefix) + "wte.weight";
  }
  if (!bare || prefixed) return;
  for (Named& t : tensors)
    if ((t.*name).rfind("lm_head.", 0) != 0) t.*name = kGpt2Prefix + t.*name;
}

std::vector<TensorInfo> gpt2_named(std::vector<TensorInfo> tensors) {
  add_gpt2_prefix(tensors, &TensorInfo::name);
  return tensors;
}

// src [R, K] (f32 host) -> [K, R].
Tensor transposed(const Tensor& src) {
  const int64_t R = src.dim(0), K = src.dim(1);
  Tensor out = Tensor::empty({K, R}, DType::kF32, Device::cpu());
  const float* a = src.data<float>();  // (R, K)
  float* b = out.data<float>();        // (K, R)
  for (int64_t r = 0; r < R; ++r)
    for (int64_t k = 0; k < K; ++k) b[k * R + r] = a[r * K + k];
  return out;
}

// t as an f32 host tensor of its own (never a view of the model's buffers).
Tensor host_f32(const Tensor& t) {
  Tensor h = t.to(Device::cpu());
  return h.dtype() == DType::kF32 ? h : h.to_dtype(DType::kF32);
}

// Columns [c0, c1) of m [R, K] as a new [R, c1 - c0] tensor.
Tensor columns(const Tensor& m, int64_t c0, int64_t c1) {
  const int64_t R = m.dim(0), K = m.dim(1), n = c1 - c0;
  Tensor out = Tensor::empty({R, n}, DType::kF32, Device::cpu());
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < n; ++c) out.data<float>()[r * n + c] = m.data<float>()[r * K + c0 + c];
  return out;
}

// [a; b; c] along dim 0 (1-D or 2-D f32 host tensors of one trailing shape).
Tensor concat_rows(const std::vector<Tensor>& parts) {
  Shape shape = parts[0].shape();
  int64_t rows = 0;
  for (const Tensor& p : parts) rows += p.dim(0);
  shape[0] = rows;
  Tensor out = Tensor::empty(shape, DType::kF32, Device::cpu());
  int64_t at = 0;
  for (const Tensor& p : parts) {
    std::copy(p.data<float>(), p.data<float>() + p.numel(), out.data<float>() + at);
    at += p.numel();
  }
  return out;
}

}  // namespace

std::vector<std::pair<std::string, Shape>> hf_checkpoint_shapes(const LlamaConfig& c) {
  if (!is_gpt2(c)) return LlamaParams::shapes(c);
  const int64_t C = c.hidden_size, F = c.intermediate_size;
  const std::string t = kGpt2Prefix;
  std::vector<std::pair<std::string, Shape>> out;
  out.emplace_back(t + "wte.weight", Shape{c.vocab_size, C});
  out.emplace_back(t + "wpe.weight", Shape{c.max_position_embeddings, C});
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = fmt::format("{}h.{}.", t, l);
    out.emplace_back(p + "ln_1.weight", Shape{C});
    out.emplace_back(p + "ln_1.bias", Shape{C});
    out.emplace_back(p + "attn.c_attn.weight", Shape{C, 3 * C});
    out.emplace_back(p + "attn.c_attn.bias", Shape{3 * C});
    out.emplace_back(p + "attn.c_proj.weight", Shape{C, C});
    out.emplace_back(p + "attn.c_proj.bias", Shape{C});
    out.emplace_back(p + "ln_2.weight", Shape{C});
    out.emplace_back(p + "ln_2.bias", Shape{C});
    out.emplace_back(p + "mlp.c_fc.weight", Shape{C, F});
    out.emplace_back(p + "mlp.c_fc.bias", Shape{F});
    out.emplace_back(p + "mlp.c_proj.weight", Shape{F, C});
    out.emplace_back(p + "mlp.c_proj.bias", Shape{C});
  }
  out.emplace_back(t + "ln_f.weight", Shape{C});
  out.emplace_back(t + "ln_f.bias", Shape{C});
  return out;
}

std::vector<std::pair<std::string, Tensor>> to_hf_tensors(
    const LlamaConfig& c, const std::vector<std::pair<std::string, const Tensor*>>& named) {
  std::map<std::string, const Tensor*> by_name(named.begin(), named.end());
  auto get = [&](const std::string& name) {
    auto it = by_name.find(name);
    SEQPAR_CHECK(it != by_name.end() && it->second->defined(), "to_hf_tensors: no tensor {}", name);
    return host_f32(*it->second);
  };
  std::vector<std::pair<std::string, Tensor>> out;
  if (!is_gpt2(c)) {
    for (const auto& [name, shape] : LlamaParams::shapes(c)) out.emplace_back(name, get(name));
    return out;
  }
  const std::string t = kGpt2Prefix;
  out.emplace_back(t + "wte.weight", get("model.embed_tokens.weight"));
  out.emplace_back(t + "wpe.weight", get("model.embed_positions.weight"));
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string s = fmt::format("model.layers.{}.", l), p = fmt::format("{}h.{}.", t, l);
    out.emplace_back(p + "ln_1.weight", get(s + "input_layernorm.weight"));
    out.emplace_back(p + "ln_1.bias", get(s + "input_layernorm.bias"));
    // [3C, C] = [Wq; Wk; Wv] (out, in) -> Conv1D [C, 3C] (in, out).
    out.emplace_back(p + "attn.c_attn.weight",
                     transposed(concat_rows({get(s + "self_attn.q_proj.weight"), get(s + "self_attn.k_proj.weight"),
                                             get(s + "self_attn.v_proj.weight")})));
    out.emplace_back(p + "attn.c_attn.bias",
                     concat_rows({get(s + "self_attn.q_proj.bias"), get(s + "self_attn.k_proj.bias"),
                                  get(s + "self_attn.v_proj.bias")}));
    out.emplace_back(p + "attn.c_proj.weight", transposed(get(s + "self_attn.o_proj.weight")));
    out.emplace_back(p + "attn.c_proj.bias", get(s + "self_attn.o_proj.bias"));
    out.emplace_back(p + "ln_2.weight", get(s + "post_attention_layernorm.weight"));
    out.emplace_back(p + "ln_2.bias", get(s + "post_attention_layernorm.bias"));
    out.emplace_back(p + "mlp.c_fc.weight", transposed(get(s + "mlp.up_proj.weight")));
    out.emplace_back(p + "mlp.c_fc.bias", get(s + "mlp.up_proj.bias"));
    out.emplace_back(p + "mlp.c_proj.weight", transposed(get(s + "mlp.down_proj.weight")));
    out.emplace_back(p + "mlp.c_proj.bias", get(s + "mlp.down_proj.bias"));
  }
  out.emplace_back(t + "ln_f.weight", get("model.norm.weight"));
  out.emplace_back(t + "ln_f.bias", get("model.norm.bias"));
  return out;
}

SafetensorsData from_hf_tensors(const LlamaConfig& c, SafetensorsData hf, const std::string& source) {
  if (!is_gpt2(c)) return hf;
  add_gpt2_prefix(hf.tensors, &std::pair<std::string, Tensor>::first);
  std::vector<TensorInfo> infos;
  for (const auto& [name, t] : hf.tensors) infos.push_back({name, t.shape(), t.dtype(), hf.path});
  check_against(c, hf_checkpoint_shapes(c), infos, source);
  const int64_t C = c.hidden_size;
  auto get = [&](const std::string& name) { return host_f32(hf.at(name)); };
  SafetensorsData out;
  out.path = hf.path;
  out.metadata = hf.metadata;
  auto put = [&](const std::string& name, Tensor t) { out.tensors.emplace_back(name, std::move(t)); };
  const std::string t = kGpt2Prefix;
  put("model.embed_tokens.weight", get(t + "wte.weight"));
  put("model.embed_positions.weight", get(t + "wpe.weight"));
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string s = fmt::format("model.layers.{}.", l), p = fmt::format("{}h.{}.", t, l);
    const Tensor qkv = get(p + "attn.c_attn.weight");  // [C, 3C] (in, out)
    const Tensor qkv_b = get(p + "attn.c_attn.bias");  // [3C]
    const char* names[] = {"q", "k", "v"};
    for (int i = 0; i < 3; ++i) {
      put(s + "self_attn." + names[i] + "_proj.weight", transposed(columns(qkv, i * C, (i + 1) * C)));
      put(s + "self_attn." + names[i] + "_proj.bias", qkv_b.rows(i * C, (i + 1) * C).clone());
    }
    put(s + "self_attn.o_proj.weight", transposed(get(p + "attn.c_proj.weight")));
    put(s + "self_attn.o_proj.bias", get(p + "attn.c_proj.bias"));
    put(s + "mlp.up_proj.weight", transposed(get(p + "mlp.c_fc.weight")));
    put(s + "mlp.up_proj.bias", get(p + "mlp.c_fc.bias"));
    put(s + "mlp.down_proj.weight", transposed(get(p + "mlp.c_proj.weight")));
    put(s + "mlp.down_proj.bias", get(p + "mlp.c_proj.bias"));
    put(s + "input_layernorm.weight", get(p + "ln_1.weight"));
    put(s + "input_layernorm.bias", get(p + "ln_1.bias"));
    put(s + "post_attention_layernorm.weight", get(p + "ln_2.weight"));
    put(s + "post_attention_layernorm.bias", get(p + "ln_2.bias"));
  }
  put("model.norm.weight", get(t + "ln_f.weight"));
  put("model.norm.bias", get(t + "ln_f.bias"));
  return out;
}

void check_params_in(const LlamaConfig& config, const std::vector<TensorInfo>& tensors, const std::string& source) {
  // The config is validated (bounded sizes), so its list of parameters is bounded too.
  config.validate();
  check_against(config, LlamaParams::shapes(config), tensors, source);
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

namespace {

// The checkpoint of `dir` under seqpar's names (GPT-2's mapped), checked against `config` before a
// tensor is read. Order matters for bounded memory: the config and the headers are checked against
// each other before a tensor is read or a model allocated (a config far beyond its tensors would
// otherwise allocate its model first).
SafetensorsData read_hf_tensors_checked(const std::string& dir, const LlamaConfig& config) {
  const std::vector<TensorInfo> headers = read_hf_checkpoint_headers(dir);
  // (A seqpar checkpoint directory holds seqpar's names whatever the family: loaded as they are.)
  const bool seqpar_names = std::any_of(headers.begin(), headers.end(),
                                        [](const TensorInfo& t) { return t.name == "model.embed_tokens.weight"; });
  if (is_gpt2(config) && !seqpar_names) {  // GPT-2's names and layout, mapped to seqpar's once checked
    config.validate();
    check_against(config, hf_checkpoint_shapes(config), gpt2_named(headers), dir);
    return from_hf_tensors(config, read_hf_checkpoint(dir), dir);
  }
  check_params_in(config, headers, dir);
  return read_hf_checkpoint(dir);
}

}  // namespace

std::unique_ptr<LlamaModel> load_hf_model(const std::string& dir, Device device) {
  const LlamaConfig config = load_hf_llama_config(dir);
  return model_from_tensors(config, read_hf_tensors_checked(dir, config), dir, device);
}

LlamaParams load_hf_params(const std::string& dir, const LlamaConfig& config, DType dtype) {
  return params_from_tensors(config, read_hf_tensors_checked(dir, config), dir, dtype);
}

}  // namespace seqpar
