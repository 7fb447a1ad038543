// HF config.json <-> LlamaConfig.
//
// Families (model_type / architectures): llama (LlamaForCausalLM), qwen2 (Qwen2ForCausalLM),
// qwen3 (Qwen3ForCausalLM), mistral (MistralForCausalLM); their options in parse_family_options.
// What is read (every family):
//   required: vocab_size, hidden_size, intermediate_size, num_hidden_layers, num_attention_heads
//   optional, with transformers' defaults: num_key_value_heads (= num_attention_heads),
//     head_dim (= hidden_size / num_attention_heads; null means absent), rms_norm_eps (1e-6),
//     max_position_embeddings (2048), tie_word_embeddings (false), hidden_act ("silu", the only
//     one accepted), mlp_bias (false, the only value accepted), attention_dropout (0 only);
//     head_dim defaults to 128 for qwen3 (Qwen3Config's default).
//   refused by name: use_mrope=true (false, as Qwen2.5 publishes it, is accepted), rope_deltas,
//     vision_config (multimodal Qwen), use_qk_norm.
//   RoPE, both spellings, with transformers 5's precedence (RotaryEmbeddingConfigMixin):
//     4.x: top-level rope_theta + optional rope_scaling {rope_type | type, factor, ...}
//     5.x: rope_parameters {rope_theta, rope_type, factor, ...}
//     A non-empty rope_scaling replaces rope_parameters; rope_theta comes from that dict, else the
//     top-level rope_theta, else 10000; for llama3, yarn and longrope a top-level
//     original_max_position_embeddings wins over the dict's, and max_position_embeddings is the last
//     fallback. The keys per rope_type (transformers' required ones must be there):
//       linear, dynamic: factor (dynamic scales from max_position_embeddings, as transformers does)
//       llama3: factor, low_freq_factor, high_freq_factor
//       yarn: factor (null: max_position_embeddings / original), beta_fast (32), beta_slow (1),
//             truncate (true), attention_factor, mscale, mscale_all_dim
//       longrope: short_factor, long_factor (head_dim / 2 numbers each), factor (absent:
//             max_position_embeddings / original), attention_factor
// gpt2 (GPT2LMHeadModel: parse_gpt2): its own keys, n_embd, n_layer, n_head, n_positions,
//   vocab_size (required), n_inner (null = 4 n_embd), layer_norm_epsilon (1e-5),
//   activation_function (gelu_new; gelu, gelu_new, gelu_pytorch_tanh accepted), tie_word_embeddings
//   (true only); scale_attn_weights (true only: scores scaled by 1/sqrt(head_dim)),
//   scale_attn_by_inverse_layer_idx and reorder_and_upcast_attn (false only) and add_cross_attention
//   (false only) are refused by name otherwise; the dropout probabilities are ignored with a warning
//   (seqpar trains without dropout).
// Unknown extra fields are ignored (configs carry token ids, initializer_range, use_cache, ...).
#include "io/hf_config.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "core/error.h"
#include "core/log.h"
#include "io/input_file.h"
#include "io/json_describe.h"

namespace seqpar {

namespace {

using nlohmann::json;
namespace fs = std::filesystem;

std::string describe(const json& j) { return describe_json(j); }

// Typed access to the fields of one JSON object; errors read "<source>: field '<prefix><name>' ...".
// A field whose value is null counts as absent, as it does for transformers.
class Fields {
 public:
  Fields(const json& obj, std::string source, std::string prefix = "")
      : obj_(obj), source_(std::move(source)), prefix_(std::move(prefix)) {}

  bool has(const char* name) const { return obj_.contains(name) && !obj_[name].is_null(); }

  int64_t integer(const char* name) const {
    const json& v = required(name);
    SEQPAR_INPUT_CHECK(v.is_number_integer(), "{}: field '{}{}' must be an integer, got {}", source_, prefix_, name,
                       describe(v));
    // nlohmann stores 2^63 and above as unsigned; get<int64_t> would wrap them negative.
    SEQPAR_INPUT_CHECK(!v.is_number_unsigned() || v.get<uint64_t>() <= uint64_t{INT64_MAX},
                       "{}: field '{}{}'={} does not fit a 64-bit integer", source_, prefix_, name, describe(v));
    return v.get<int64_t>();
  }
  int64_t integer(const char* name, int64_t fallback) const { return has(name) ? integer(name) : fallback; }

  double number(const char* name) const {
    const json& v = required(name);
    SEQPAR_INPUT_CHECK(v.is_number(), "{}: field '{}{}' must be a number, got {}", source_, prefix_, name, describe(v));
    return v.get<double>();
  }
  double number(const char* name, double fallback) const { return has(name) ? number(name) : fallback; }

  bool boolean(const char* name, bool fallback) const {
    if (!has(name)) return fallback;
    const json& v = obj_[name];
    SEQPAR_INPUT_CHECK(v.is_boolean(), "{}: field '{}{}' must be true or false, got {}", source_, prefix_, name,
                       describe(v));
    return v.get<bool>();
  }

  std::optional<std::string> string(const char* name) const {
    if (!has(name)) return std::nullopt;
    const json& v = obj_[name];
    SEQPAR_INPUT_CHECK(v.is_string(), "{}: field '{}{}' must be a string, got {}", source_, prefix_, name, describe(v));
    return v.get<std::string>();
  }

  // A list of numbers (a required field).
  std::vector<double> numbers(const char* name) const {
    const json& v = required(name);
    SEQPAR_INPUT_CHECK(v.is_array(), "{}: field '{}{}' must be a list of numbers, got {}", source_, prefix_, name,
                       describe(v));
    std::vector<double> out;
    out.reserve(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      SEQPAR_INPUT_CHECK(v[i].is_number(), "{}: field '{}{}[{}]' must be a number, got {}", source_, prefix_, name, i,
                         describe(v[i]));
      out.push_back(v[i].get<double>());
    }
    return out;
  }

  // The object under `name`, or nullptr when absent/null.
  const json* object(const char* name) const {
    if (!has(name)) return nullptr;
    const json& v = obj_[name];
    SEQPAR_INPUT_CHECK(v.is_object(), "{}: field '{}{}' must be an object, got {}", source_, prefix_, name,
                       describe(v));
    return &v;
  }

 private:
  const json& required(const char* name) const {
    SEQPAR_INPUT_CHECK(obj_.contains(name), "{}: field '{}{}' is missing", source_, prefix_, name);
    return obj_[name];
  }

  const json& obj_;
  std::string source_;
  std::string prefix_;
};

// RoPE settings from either spelling (see the header comment for the precedence).
RopeConfig parse_rope(const Fields& top, const std::string& source, int64_t max_position_embeddings) {
  const json* dict = nullptr;
  std::string dict_name;
  if (const json* scaling = top.object("rope_scaling"); scaling && !scaling->empty()) {
    dict = scaling;
    dict_name = "rope_scaling";
  } else if (const json* params = top.object("rope_parameters")) {
    dict = params;
    dict_name = "rope_parameters";
  }

  RopeConfig rope;
  rope.theta = top.number("rope_theta", 10000.0);
  double partial_rotary_factor = top.number("partial_rotary_factor", 1.0);
  std::string type_field = "rope_type";
  if (dict) {
    Fields d(*dict, source, dict_name + ".");
    rope.theta = d.number("rope_theta", rope.theta);
    partial_rotary_factor = d.number("partial_rotary_factor", partial_rotary_factor);
    if (auto t = d.string("rope_type")) {
      rope.type = *t;
      type_field = dict_name + ".rope_type";
    } else if (auto t2 = d.string("type")) {  // the older 4.x key
      rope.type = *t2;
      type_field = dict_name + ".type";
    }
    const std::string& t = rope.type;
    SEQPAR_INPUT_CHECK(
        t == "default" || t == "linear" || t == "dynamic" || t == "llama3" || t == "yarn" || t == "longrope",
        "{}: field '{}' = '{}' is not supported (supported rope types: {})", source, type_field, t, rope_type_names());
    // llama3, yarn, longrope (transformers' standardize_rope_params): a top-level
    // original_max_position_embeddings wins over the dict's, max_position_embeddings is the fallback.
    if (t == "llama3" || t == "yarn" || t == "longrope") {
      rope.original_max_position_embeddings =
          top.has("original_max_position_embeddings")
              ? top.integer("original_max_position_embeddings")
              : d.integer("original_max_position_embeddings", max_position_embeddings);
    }
    const double implicit_factor =
        static_cast<double>(max_position_embeddings) / static_cast<double>(rope.original_max_position_embeddings);
    if (t == "linear" || t == "dynamic" || t == "llama3") {
      rope.factor = d.number("factor");
    } else if (t == "yarn") {
      // Required, but a null factor is transformers' max_position_embeddings / original.
      SEQPAR_INPUT_CHECK(dict->contains("factor"), "{}: field '{}.factor' is missing (rope_type=yarn)", source,
                         dict_name);
      rope.factor = d.number("factor", implicit_factor);
    } else if (t == "longrope") {
      rope.factor = d.number("factor", implicit_factor);
    }
    if (t == "llama3") {
      rope.low_freq_factor = d.number("low_freq_factor");
      rope.high_freq_factor = d.number("high_freq_factor");
    }
    if (t == "dynamic" && d.has("original_max_position_embeddings"))
      log_warn(
          "{}: {}.original_max_position_embeddings ignored for rope_type=dynamic: transformers scales from "
          "max_position_embeddings={}",
          source, dict_name, max_position_embeddings);
    if (t == "yarn" || t == "longrope") {
      if (d.has("attention_factor")) rope.attention_factor = d.number("attention_factor");
    }
    if (t == "yarn") {
      // transformers: `beta_fast or 32`, `beta_slow or 1` (0 counts as absent), truncate defaults to true.
      rope.beta_fast = d.number("beta_fast", 0.0);
      rope.beta_slow = d.number("beta_slow", 0.0);
      if (rope.beta_fast == 0.0) rope.beta_fast = 32.0;
      if (rope.beta_slow == 0.0) rope.beta_slow = 1.0;
      rope.mscale = d.number("mscale", 0.0);
      rope.mscale_all_dim = d.number("mscale_all_dim", 0.0);
      rope.truncate = d.boolean("truncate", true);
    }
    if (t == "longrope") {
      rope.short_factor = d.numbers("short_factor");
      rope.long_factor = d.numbers("long_factor");
    }
  }
  SEQPAR_INPUT_CHECK(partial_rotary_factor == 1.0,
                     "{}: partial_rotary_factor={} is not supported: seqpar's Llama rotates the whole head_dim", source,
                     partial_rotary_factor);
  return rope;
}

// The family from model_type (or, without it, architectures); both must agree when both are given.
ModelFamily parse_family(const Fields& f, const json& root, const std::string& src) {
  const ModelFamily families[] = {ModelFamily::kLlama, ModelFamily::kQwen2, ModelFamily::kQwen3, ModelFamily::kMistral,
                                  ModelFamily::kGpt2};
  std::optional<ModelFamily> family;
  if (auto model_type = f.string("model_type")) {
    for (ModelFamily m : families)
      if (*model_type == model_family_name(m)) family = m;
    SEQPAR_INPUT_CHECK(family.has_value(),
                       "{}: model_type='{}' is not supported (supported: llama, qwen2, qwen3, mistral, gpt2)", src,
                       *model_type);
  }
  if (f.has("architectures")) {
    const json& arch = root["architectures"];
    SEQPAR_INPUT_CHECK(arch.is_array(), "{}: field 'architectures' must be a list of strings, got {}", src,
                       describe(arch));
    std::optional<ModelFamily> named;
    for (const json& a : arch)
      for (ModelFamily m : families)
        if (a.is_string() && a.get<std::string>() == model_family_architecture(m)) named = m;
    SEQPAR_INPUT_CHECK(named.has_value(),
                       "{}: architectures={} names none of LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, "
                       "MistralForCausalLM, GPT2LMHeadModel (the families seqpar supports)",
                       src, arch.dump());
    SEQPAR_INPUT_CHECK(!family || *family == *named, "{}: architectures={} does not match model_type='{}'", src,
                       arch.dump(), model_family_name(*family));
    family = named;
  }
  return family.value_or(ModelFamily::kLlama);
}

// The family's options: projection biases, q/k norms and the sliding window with the layers it
// applies to, as transformers (5.x, also 4.x's spelling) applies them:
//   llama:   attention_bias -> q/k/v/o biases; no window (a sliding_window key is refused).
//   qwen2:   q/k/v biases always; sliding_window counts only when use_sliding_window; its layers
//            are layer_types' "sliding_attention" entries, or else layers >= max_window_layers.
//   qwen3:   q_norm, k_norm; attention_bias -> q/k/v/o biases; windows as qwen2.
//   mistral: sliding_window (null = full causal) on every layer.
void parse_family_options(const Fields& f, const json& root, const std::string& src, LlamaConfig& c) {
  const ModelFamily family = c.family;
  const bool attention_bias = f.boolean("attention_bias", false);
  if (family == ModelFamily::kQwen2) {
    SEQPAR_INPUT_CHECK(!attention_bias, "{}: attention_bias is not a qwen2 key (Qwen2 always has q/k/v biases)", src);
    c.qkv_bias = true;
  } else if (family == ModelFamily::kMistral) {
    SEQPAR_INPUT_CHECK(!attention_bias, "{}: attention_bias=true is not supported for mistral (no projection biases)",
                       src);
  } else {
    c.qkv_bias = c.o_bias = attention_bias;
  }
  c.qk_norm = family == ModelFamily::kQwen3;
  const int64_t L = c.num_layers;
  if (family == ModelFamily::kLlama) {
    SEQPAR_INPUT_CHECK(!f.has("sliding_window") && !f.has("layer_types"),
                       "{}: sliding_window / layer_types are not llama keys (use model_type mistral or qwen2 for a "
                       "sliding window)",
                       src);
    return;
  }
  int64_t window = f.integer("sliding_window", 0);
  SEQPAR_INPUT_CHECK(!f.has("sliding_window") || window >= 1, "{}: sliding_window={} must be null or >= 1", src,
                     window);
  if (family == ModelFamily::kMistral) {
    SEQPAR_INPUT_CHECK(!f.has("layer_types"), "{}: layer_types is not a mistral key (its window is on every layer)",
                       src);
    c.sliding_window = window;
    if (window > 0) c.sliding_layers.assign(static_cast<size_t>(std::max<int64_t>(L, 0)), true);
    return;
  }
  // qwen2 / qwen3
  c.use_sliding_window = f.boolean("use_sliding_window", false);
  c.max_window_layers = f.integer("max_window_layers", 28);
  if (!c.use_sliding_window) window = 0;  // transformers: sliding_window = None
  // Absent (not null): the config class's default window.
  if (!root.contains("sliding_window") && c.use_sliding_window) window = 4096;
  c.sliding_window = window;
  std::vector<bool> sliding(static_cast<size_t>(std::max<int64_t>(L, 0)), false);
  if (f.has("layer_types")) {
    const json& types = root["layer_types"];
    SEQPAR_INPUT_CHECK(types.is_array() && static_cast<int64_t>(types.size()) == L,
                       "{}: layer_types must be a list of num_hidden_layers={} strings, got {}", src, L,
                       describe(types));
    for (size_t l = 0; l < types.size(); ++l) {
      const std::string t = types[l].is_string() ? types[l].get<std::string>() : types[l].dump();
      SEQPAR_INPUT_CHECK(t == "full_attention" || t == "sliding_attention",
                         "{}: layer_types[{}]='{}' is not supported (full_attention or sliding_attention)", src, l, t);
      sliding[l] = t == "sliding_attention";
    }
  } else {
    for (int64_t l = c.max_window_layers; l < L; ++l) sliding[static_cast<size_t>(l)] = true;
  }
  // A sliding layer without a window (sliding_window None) attends fully, as in transformers.
  if (window > 0 && std::find(sliding.begin(), sliding.end(), true) != sliding.end()) c.sliding_layers = sliding;
}

// GPT2Config (transformers' configuration_gpt2.py) -> a gpt2 LlamaConfig.
LlamaConfig parse_gpt2(const Fields& f, const std::string& src) {
  for (const char* key : {"scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn", "add_cross_attention"})
    SEQPAR_INPUT_CHECK(!f.boolean(key, false), "{}: {}=true is not supported by seqpar's gpt2 (false only)", src, key);
  SEQPAR_INPUT_CHECK(f.boolean("scale_attn_weights", true),
                     "{}: scale_attn_weights=false is not supported by seqpar's gpt2 (its attention scales the scores "
                     "by 1/sqrt(head_dim))",
                     src);
  SEQPAR_INPUT_CHECK(f.boolean("tie_word_embeddings", true),
                     "{}: tie_word_embeddings=false is not supported by seqpar's gpt2 (its LM head is transformer.wte)",
                     src);
  for (const char* key : {"resid_pdrop", "embd_pdrop", "attn_pdrop"})
    if (f.number(key, 0.0) != 0.0)
      log_warn("{}: {}={} ignored: seqpar trains without dropout", src, key, f.number(key, 0.0));
  LlamaConfig c;
  c.vocab_size = f.integer("vocab_size");
  c.hidden_size = f.integer("n_embd");
  c.num_layers = f.integer("n_layer");
  c.num_heads = f.integer("n_head");
  c.max_position_embeddings = f.integer("n_positions");
  c.intermediate_size = f.has("n_inner") ? f.integer("n_inner") : 4 * c.hidden_size;
  c.rms_norm_eps = f.number("layer_norm_epsilon", 1e-5);
  const std::string act = f.string("activation_function").value_or("gelu_new");
  SEQPAR_INPUT_CHECK(act == "gelu" || act == "gelu_new" || act == "gelu_pytorch_tanh",
                     "{}: activation_function='{}' is not supported (supported: gelu, gelu_new, gelu_pytorch_tanh)",
                     src, act);
  if (c.num_heads > 0)
    SEQPAR_INPUT_CHECK(c.hidden_size % c.num_heads == 0, "{}: n_embd={} must be a multiple of n_head={}", src,
                       c.hidden_size, c.num_heads);
  make_gpt2(c, act);
  return c;
}

}  // namespace

LlamaConfig parse_hf_llama_config(const std::string& json_text, const std::string& source_name) {
  const std::string& src = source_name;
  const json root = parse_json_input(json_text, src);
  SEQPAR_INPUT_CHECK(root.is_object(), "{}: config.json must be a JSON object, got {}", src, describe(root));
  Fields f(root, src);

  const ModelFamily family = parse_family(f, root, src);
  if (family == ModelFamily::kGpt2) {
    LlamaConfig c = parse_gpt2(f, src);
    try {
      c.validate();
    } catch (const InputError& e) {
      throw InputError(fmt::format("{}: {}", src, e.what()));
    }
    return c;
  }
  if (auto act = f.string("hidden_act"))
    SEQPAR_INPUT_CHECK(*act == "silu", "{}: hidden_act='{}' is not supported (seqpar's Llama MLP is SwiGLU: silu)", src,
                       *act);
  SEQPAR_INPUT_CHECK(!f.boolean("mlp_bias", false),
                     "{}: mlp_bias=true is not supported: seqpar's MLP projections have no biases", src);
  SEQPAR_INPUT_CHECK(f.number("attention_dropout", 0.0) == 0.0,
                     "{}: attention_dropout={} is not supported: seqpar's attention has no dropout (0 only)", src,
                     f.number("attention_dropout", 0.0));
  // Qwen2.5 (and the Qwen2-based DeepSeek-R1 distills) publish "use_mrope": false; only true means
  // multimodal rotary positions.
  SEQPAR_INPUT_CHECK(!f.boolean("use_mrope", false),
                     "{}: use_mrope=true is not supported by seqpar's {} (multimodal rotary positions; false only)",
                     src, model_family_name(family));
  for (const char* key : {"rope_deltas", "vision_config", "use_qk_norm"}) {
    SEQPAR_INPUT_CHECK(!f.has(key), "{}: field '{}' is not supported by seqpar's {} (remove it or use another model)",
                       src, key, model_family_name(family));
  }
  LlamaConfig c;
  c.vocab_size = f.integer("vocab_size");
  c.hidden_size = f.integer("hidden_size");
  c.intermediate_size = f.integer("intermediate_size");
  c.num_layers = f.integer("num_hidden_layers");
  c.num_heads = f.integer("num_attention_heads");
  c.num_kv_heads = f.integer("num_key_value_heads", c.num_heads);
  c.family = family;
  if (f.has("head_dim")) {
    c.head_dim = f.integer("head_dim");
  } else if (family == ModelFamily::kQwen3) {
    c.head_dim = 128;            // Qwen3Config's default, not hidden_size / num_attention_heads
  } else if (c.num_heads > 0) {  // (num_attention_heads <= 0 is reported by validate() below)
    SEQPAR_INPUT_CHECK(c.hidden_size % c.num_heads == 0,
                       "{}: hidden_size={} must be a multiple of num_attention_heads={} when head_dim is not given",
                       src, c.hidden_size, c.num_heads);
    c.head_dim = c.hidden_size / c.num_heads;
  }
  parse_family_options(f, root, src, c);
  c.rms_norm_eps = f.number("rms_norm_eps", 1e-6);
  c.max_position_embeddings = f.integer("max_position_embeddings", 2048);
  c.tie_word_embeddings = f.boolean("tie_word_embeddings", false);
  c.rope = parse_rope(f, src, c.max_position_embeddings);

  try {
    c.validate();
  } catch (const InputError& e) {
    throw InputError(fmt::format("{}: {}", src, e.what()));
  }
  return c;
}

LlamaConfig load_hf_llama_config(const std::string& path) {
  std::error_code ec;
  std::string file = path;
  if (fs::is_directory(path, ec)) {
    file = (fs::path(path) / "config.json").string();
    SEQPAR_INPUT_CHECK(fs::exists(file, ec), "{}: no config.json in this directory", path);
  }
  SEQPAR_INPUT_CHECK(fs::exists(file, ec), "{}: no such file", file);
  return parse_hf_llama_config(read_input_file(file, kConfigInput), file);
}

namespace {

// GPT2Config's keys (transformers 4.x and 5.x read the same ones).
std::string gpt2_config_json(const LlamaConfig& c, const std::string& torch_dtype) {
  const json out = {
      {"architectures", {model_family_architecture(c.family)}},
      {"model_type", "gpt2"},
      {"vocab_size", c.vocab_size},
      {"n_embd", c.hidden_size},
      {"n_layer", c.num_layers},
      {"n_head", c.num_heads},
      {"n_inner", c.intermediate_size},
      {"n_positions", c.max_position_embeddings},
      {"n_ctx", c.max_position_embeddings},
      {"layer_norm_epsilon", c.rms_norm_eps},
      {"activation_function", c.activation_function},
      {"resid_pdrop", 0.0},
      {"embd_pdrop", 0.0},
      {"attn_pdrop", 0.0},
      {"scale_attn_weights", true},
      {"scale_attn_by_inverse_layer_idx", false},
      {"reorder_and_upcast_attn", false},
      {"tie_word_embeddings", true},
      {"initializer_range", 0.02},
      {"use_cache", true},
      {"torch_dtype", torch_dtype},  // transformers 4.x
      {"dtype", torch_dtype},        // transformers 5.x
  };
  return out.dump(2) + "\n";
}

}  // namespace

std::string hf_llama_config_json(const LlamaConfig& config, const std::string& torch_dtype) {
  config.validate();
  SEQPAR_INPUT_CHECK(torch_dtype == "float32" || torch_dtype == "bfloat16" || torch_dtype == "float16",
                     "torch_dtype='{}' is not supported (supported: float32, bfloat16, float16)", torch_dtype);
  if (config.family == ModelFamily::kGpt2) return gpt2_config_json(config, torch_dtype);
  const RopeConfig& rope = config.rope;

  // transformers 5 reads rope_parameters (and takes rope_theta into it); 4.x reads rope_theta and
  // rope_scaling. For every scaled type both dicts are written with the same values: 5.x lets a
  // non-empty rope_scaling replace rope_parameters, so the two can never disagree. Every key that
  // changes the frequencies is written, defaults included, so transformers rebuilds the same ones.
  json scaling = nullptr;
  json params = {{"rope_type", rope.type}, {"rope_theta", rope.theta}};
  if (rope.type != "default") {
    scaling = {{"rope_type", rope.type}, {"factor", rope.factor}};
    if (rope.type == "llama3") {
      scaling["low_freq_factor"] = rope.low_freq_factor;
      scaling["high_freq_factor"] = rope.high_freq_factor;
    }
    if (rope.type == "llama3" || rope.type == "yarn" || rope.type == "longrope")
      scaling["original_max_position_embeddings"] = rope.original_max_position_embeddings;
    if (rope.type == "yarn") {
      scaling["beta_fast"] = rope.beta_fast;
      scaling["beta_slow"] = rope.beta_slow;
      scaling["truncate"] = rope.truncate;
      if (rope.mscale != 0.0) scaling["mscale"] = rope.mscale;
      if (rope.mscale_all_dim != 0.0) scaling["mscale_all_dim"] = rope.mscale_all_dim;
    }
    if (rope.type == "longrope") {
      scaling["short_factor"] = rope.short_factor;
      scaling["long_factor"] = rope.long_factor;
    }
    if (rope.attention_factor) scaling["attention_factor"] = *rope.attention_factor;
    params.update(scaling);
  }

  const ModelFamily family = config.family;
  json out = {
      {"architectures", {model_family_architecture(family)}},
      {"model_type", model_family_name(family)},
      {"vocab_size", config.vocab_size},
      {"hidden_size", config.hidden_size},
      {"intermediate_size", config.intermediate_size},
      {"num_hidden_layers", config.num_layers},
      {"num_attention_heads", config.num_heads},
      {"num_key_value_heads", config.num_kv_heads},
      {"head_dim", config.head_dim},
      {"hidden_act", "silu"},
      {"max_position_embeddings", config.max_position_embeddings},
      {"rms_norm_eps", config.rms_norm_eps},
      {"tie_word_embeddings", config.tie_word_embeddings},
      {"attention_dropout", 0.0},
      {"initializer_range", 0.02},
      {"use_cache", true},
      {"rope_theta", rope.theta},
      {"rope_parameters", params},
      {"rope_scaling", scaling},
      {"torch_dtype", torch_dtype},  // transformers 4.x
      {"dtype", torch_dtype},        // transformers 5.x
  };
  SEQPAR_INPUT_CHECK(family != ModelFamily::kQwen2 || (config.qkv_bias && !config.o_bias),
                     "a qwen2 model has q/k/v biases and no o_proj bias");
  SEQPAR_INPUT_CHECK(family == ModelFamily::kQwen2 || config.qkv_bias == config.o_bias,
                     "a {} model has biases on all of q/k/v/o or none (attention_bias)", model_family_name(family));
  SEQPAR_INPUT_CHECK(config.qk_norm == (family == ModelFamily::kQwen3), "q/k norms are exactly what qwen3 has");
  if (family == ModelFamily::kLlama) {
    out["attention_bias"] = config.o_bias;
    out["mlp_bias"] = false;
    out["pretraining_tp"] = 1;
  } else if (family == ModelFamily::kQwen3) {
    out["attention_bias"] = config.o_bias;
  }
  const bool windowed =
      std::find(config.sliding_layers.begin(), config.sliding_layers.end(), true) != config.sliding_layers.end();
  if (family == ModelFamily::kMistral) {
    out["sliding_window"] = windowed ? json(config.sliding_window) : json(nullptr);
  } else if (family != ModelFamily::kLlama) {
    // layer_types says exactly which layers slide; use_sliding_window and max_window_layers are
    // kept as read (transformers 4.x without layer_types reads them).
    out["use_sliding_window"] = windowed;
    out["sliding_window"] = windowed ? json(config.sliding_window) : json(nullptr);
    out["max_window_layers"] = config.max_window_layers;
    json types = json::array();
    for (int64_t l = 0; l < config.num_layers; ++l)
      types.push_back(config.layer_window(l) > 0 ? "sliding_attention" : "full_attention");
    out["layer_types"] = types;
  }
  return out.dump(2) + "\n";
}

}  // namespace seqpar
