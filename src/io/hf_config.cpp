// HF config.json <-> LlamaConfig.
//
// What is read (LlamaForCausalLM, model_type "llama"):
//   required: vocab_size, hidden_size, intermediate_size, num_hidden_layers, num_attention_heads
//   optional, with transformers' defaults: num_key_value_heads (= num_attention_heads),
//     head_dim (= hidden_size / num_attention_heads; null means absent), rms_norm_eps (1e-6),
//     max_position_embeddings (2048), tie_word_embeddings (false), hidden_act ("silu", the only
//     one accepted), attention_bias / mlp_bias (false, the only value accepted).
//   RoPE, both spellings, with transformers 5's precedence (RotaryEmbeddingConfigMixin):
//     4.x: top-level rope_theta + optional rope_scaling {rope_type | type, factor, low_freq_factor,
//          high_freq_factor, original_max_position_embeddings}
//     5.x: rope_parameters {rope_theta, rope_type, factor, ...}
//     A non-empty rope_scaling replaces rope_parameters; rope_theta comes from that dict, else the
//     top-level rope_theta, else 10000; for llama3, a top-level original_max_position_embeddings
//     wins over the dict's, and max_position_embeddings is the last fallback.
// Unknown extra fields are ignored (configs carry token ids, initializer_range, use_cache, ...).
#include "io/hf_config.h"
#include "io/input_file.h"
#include "io/json_describe.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "core/error.h"

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
    SEQPAR_INPUT_CHECK(rope.type == "default" || rope.type == "llama3",
                       "{}: field '{}' = '{}' is not supported (supported rope types: default, llama3)", source,
                       type_field, rope.type);
    if (rope.type == "llama3") {
      rope.factor = d.number("factor");
      rope.low_freq_factor = d.number("low_freq_factor");
      rope.high_freq_factor = d.number("high_freq_factor");
      rope.original_max_position_embeddings =
          top.has("original_max_position_embeddings")
              ? top.integer("original_max_position_embeddings")
              : d.integer("original_max_position_embeddings", max_position_embeddings);
    }
  }
  SEQPAR_INPUT_CHECK(partial_rotary_factor == 1.0,
                     "{}: partial_rotary_factor={} is not supported: seqpar's Llama rotates the whole head_dim", source,
                     partial_rotary_factor);
  return rope;
}

}  // namespace

LlamaConfig parse_hf_llama_config(const std::string& json_text, const std::string& source_name) {
  const std::string& src = source_name;
  const json root = parse_json_input(json_text, src);
  SEQPAR_INPUT_CHECK(root.is_object(), "{}: config.json must be a JSON object, got {}", src, describe(root));
  Fields f(root, src);

  // Is it a Llama at all?
  if (f.has("architectures")) {
    const json& arch = root["architectures"];
    SEQPAR_INPUT_CHECK(arch.is_array(), "{}: field 'architectures' must be a list of strings, got {}", src,
                       describe(arch));
    bool llama = false;
    for (const json& a : arch) llama = llama || (a.is_string() && a.get<std::string>() == "LlamaForCausalLM");
    SEQPAR_INPUT_CHECK(llama, "{}: architectures={} does not contain LlamaForCausalLM (seqpar supports Llama only)",
                       src, short_json(arch));
  }
  if (auto model_type = f.string("model_type"))
    SEQPAR_INPUT_CHECK(*model_type == "llama", "{}: model_type='{}' is not supported (supported: llama)", src,
                       *model_type);
  if (auto act = f.string("hidden_act"))
    SEQPAR_INPUT_CHECK(*act == "silu", "{}: hidden_act='{}' is not supported (seqpar's Llama MLP is SwiGLU: silu)", src,
                       *act);
  SEQPAR_INPUT_CHECK(!f.boolean("attention_bias", false),
                     "{}: attention_bias=true is not supported: seqpar's Llama has no projection biases", src);
  SEQPAR_INPUT_CHECK(!f.boolean("mlp_bias", false),
                     "{}: mlp_bias=true is not supported: seqpar's Llama has no projection biases", src);

  LlamaConfig c;
  c.vocab_size = f.integer("vocab_size");
  c.hidden_size = f.integer("hidden_size");
  c.intermediate_size = f.integer("intermediate_size");
  c.num_layers = f.integer("num_hidden_layers");
  c.num_heads = f.integer("num_attention_heads");
  c.num_kv_heads = f.integer("num_key_value_heads", c.num_heads);
  if (f.has("head_dim")) {
    c.head_dim = f.integer("head_dim");
  } else if (c.num_heads > 0) {  // (num_attention_heads <= 0 is reported by validate() below)
    SEQPAR_INPUT_CHECK(c.hidden_size % c.num_heads == 0,
                       "{}: hidden_size={} must be a multiple of num_attention_heads={} when head_dim is not given",
                       src, c.hidden_size, c.num_heads);
    c.head_dim = c.hidden_size / c.num_heads;
  }
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

std::string hf_llama_config_json(const LlamaConfig& config, const std::string& torch_dtype) {
  config.validate();
  SEQPAR_INPUT_CHECK(torch_dtype == "float32" || torch_dtype == "bfloat16" || torch_dtype == "float16",
                     "torch_dtype='{}' is not supported (supported: float32, bfloat16, float16)", torch_dtype);
  const RopeConfig& rope = config.rope;

  // transformers 5 reads rope_parameters (and takes rope_theta into it); 4.x reads rope_theta and
  // rope_scaling. For llama3 both dicts are written with the same values: 5.x lets a non-empty
  // rope_scaling replace rope_parameters, so the two can never disagree.
  json scaling = nullptr;
  json params = {{"rope_type", rope.type}, {"rope_theta", rope.theta}};
  if (rope.type == "llama3") {
    scaling = {{"rope_type", "llama3"},
               {"factor", rope.factor},
               {"low_freq_factor", rope.low_freq_factor},
               {"high_freq_factor", rope.high_freq_factor},
               {"original_max_position_embeddings", rope.original_max_position_embeddings}};
    params.update(scaling);
  }

  json out = {
      {"architectures", {"LlamaForCausalLM"}},
      {"model_type", "llama"},
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
      {"attention_bias", false},
      {"attention_dropout", 0.0},
      {"mlp_bias", false},
      {"pretraining_tp", 1},
      {"initializer_range", 0.02},
      {"use_cache", true},
      {"rope_theta", rope.theta},
      {"rope_parameters", params},
      {"rope_scaling", scaling},
      {"torch_dtype", torch_dtype},  // transformers 4.x
      {"dtype", torch_dtype},        // transformers 5.x
  };
  return out.dump(2) + "\n";
}

}  // namespace seqpar
