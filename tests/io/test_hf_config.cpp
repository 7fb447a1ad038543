// HF config.json: both RoPE spellings, defaults, every refusal with its message, round trip.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "io/hf_config.h"
#include "io/safetensors.h"
#include "io_test_util.h"
#include "test_util.h"

namespace seqpar {
namespace {

using nlohmann::json;

// Llama-3.1-8B's config.json as transformers 4.4x wrote it (token ids etc. are ignored fields).
const char* kLlama31Config4x = R"({
  "architectures": ["LlamaForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 128000,
  "eos_token_id": 128001,
  "hidden_act": "silu",
  "hidden_size": 4096,
  "initializer_range": 0.02,
  "intermediate_size": 14336,
  "max_position_embeddings": 131072,
  "mlp_bias": false,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 32,
  "num_key_value_heads": 8,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": {
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
    "rope_type": "llama3"
  },
  "rope_theta": 500000.0,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.43.0.dev0",
  "use_cache": true,
  "vocab_size": 128256
})";

// A small Llama as transformers 5.x writes it: rope_parameters, "dtype", no top-level rope_theta.
const char* kSmallConfig5x = R"({
  "architectures": ["LlamaForCausalLM"],
  "model_type": "llama",
  "vocab_size": 100,
  "hidden_size": 64,
  "intermediate_size": 128,
  "num_hidden_layers": 2,
  "num_attention_heads": 4,
  "num_key_value_heads": 2,
  "head_dim": 16,
  "max_position_embeddings": 131072,
  "rms_norm_eps": 1e-06,
  "rope_parameters": {
    "factor": 32.0,
    "high_freq_factor": 4.0,
    "low_freq_factor": 1.0,
    "original_max_position_embeddings": 8192,
    "rope_theta": 500000.0,
    "rope_type": "llama3"
  },
  "tie_word_embeddings": true,
  "dtype": "bfloat16",
  "pad_token_id": null,
  "transformers_version": "5.24.0"
})";

// The smallest accepted config: only the required fields.
json minimal() {
  return {{"vocab_size", 32},
          {"hidden_size", 16},
          {"intermediate_size", 48},
          {"num_hidden_layers", 2},
          {"num_attention_heads", 4}};
}

LlamaConfig parse(const json& j) { return parse_hf_llama_config(j.dump(), "cfg.json"); }

TEST(HfConfig, ParsesTransformers4Spelling) {
  LlamaConfig c = parse_hf_llama_config(kLlama31Config4x, "llama31/config.json");
  EXPECT_EQ(c.vocab_size, 128256);
  EXPECT_EQ(c.hidden_size, 4096);
  EXPECT_EQ(c.intermediate_size, 14336);
  EXPECT_EQ(c.num_layers, 32);
  EXPECT_EQ(c.num_heads, 32);
  EXPECT_EQ(c.num_kv_heads, 8);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_EQ(c.max_position_embeddings, 131072);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.rope.type, "llama3");
  EXPECT_DOUBLE_EQ(c.rope.theta, 500000.0);
  EXPECT_DOUBLE_EQ(c.rope.factor, 8.0);
  EXPECT_DOUBLE_EQ(c.rope.low_freq_factor, 1.0);
  EXPECT_DOUBLE_EQ(c.rope.high_freq_factor, 4.0);
  EXPECT_EQ(c.rope.original_max_position_embeddings, 8192);
}

TEST(HfConfig, ParsesTransformers5Spelling) {
  LlamaConfig c = parse_hf_llama_config(kSmallConfig5x, "small/config.json");
  EXPECT_EQ(c.vocab_size, 100);
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.num_kv_heads, 2);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.rope.type, "llama3");
  EXPECT_DOUBLE_EQ(c.rope.theta, 500000.0);
  EXPECT_DOUBLE_EQ(c.rope.factor, 32.0);
  EXPECT_EQ(c.rope.original_max_position_embeddings, 8192);
}

TEST(HfConfig, DefaultsOfOptionalFields) {
  json j = minimal();
  j["head_dim"] = nullptr;             // null means absent
  j["num_key_value_heads"] = nullptr;  // likewise
  j["rope_scaling"] = nullptr;
  LlamaConfig c = parse(j);
  EXPECT_EQ(c.num_kv_heads, 4);
  EXPECT_EQ(c.head_dim, 4);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.max_position_embeddings, 2048);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.rope.type, "default");
  EXPECT_DOUBLE_EQ(c.rope.theta, 10000.0);

  // An explicit head_dim need not be hidden_size / heads; unknown fields are ignored.
  j["head_dim"] = 8;
  j["some_future_field"] = {{"x", 1}};
  j["rope_theta"] = 1234;  // an integer is a fine number
  c = parse(j);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_DOUBLE_EQ(c.rope.theta, 1234.0);
}

TEST(HfConfig, RopePrecedenceFollowsTransformers5) {
  json j = minimal();
  // Older 4.x key "type" instead of "rope_type".
  j["rope_scaling"] = {{"type", "llama3"},
                       {"factor", 8.0},
                       {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 1024}};
  EXPECT_EQ(parse(j).rope.type, "llama3");

  // original_max_position_embeddings: the top-level field, else the dict, else max_position_embeddings.
  j["max_position_embeddings"] = 4096;
  EXPECT_EQ(parse(j).rope.original_max_position_embeddings, 1024);
  j["original_max_position_embeddings"] = 512;
  EXPECT_EQ(parse(j).rope.original_max_position_embeddings, 512);
  j.erase("original_max_position_embeddings");
  j["rope_scaling"].erase("original_max_position_embeddings");
  EXPECT_EQ(parse(j).rope.original_max_position_embeddings, 4096);

  // rope_theta inside the dict wins over the top-level one; a non-empty rope_scaling replaces
  // rope_parameters; an empty one does not.
  j = minimal();
  j["rope_theta"] = 10.0;
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 20.0}};
  EXPECT_DOUBLE_EQ(parse(j).rope.theta, 20.0);
  j["rope_scaling"] = json::object();
  EXPECT_DOUBLE_EQ(parse(j).rope.theta, 20.0);
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 2.0}, {"low_freq_factor", 1.0}, {"high_freq_factor", 2.0}};
  LlamaConfig c = parse(j);
  EXPECT_EQ(c.rope.type, "llama3");
  EXPECT_DOUBLE_EQ(c.rope.theta, 10.0);
  EXPECT_DOUBLE_EQ(c.rope.factor, 2.0);
}

TEST(HfConfig, UnsupportedRopeTypes) {
  // The supported scaled types are tests/io/test_hf_rope.cpp's.
  for (const char* type : {"ntk", "proportional", "su", "mrope"}) {
    json j = minimal();
    j["rope_scaling"] = {{"rope_type", type}, {"factor", 2.0}};
    EXPECT_INPUT_ERROR(parse(j), fmt::format("cfg.json: field 'rope_scaling.rope_type' = '{}' is not supported "
                                             "(supported rope types: default, linear, dynamic, llama3, yarn, longrope)",
                                             type));
    j.erase("rope_scaling");
    j["rope_parameters"] = {{"type", type}, {"rope_theta", 10000.0}};
    EXPECT_INPUT_ERROR(parse(j), fmt::format("field 'rope_parameters.type' = '{}' is not supported", type));
  }
  json j = minimal();
  j["partial_rotary_factor"] = 0.5;
  EXPECT_INPUT_ERROR(parse(j), "cfg.json: partial_rotary_factor=0.5 is not supported");
}

TEST(HfConfig, RefusesWhatSeqparsLlamaIsNot) {
  json j = minimal();
  j["mlp_bias"] = true;
  EXPECT_INPUT_ERROR(parse(j), "cfg.json: mlp_bias=true is not supported: seqpar's MLP projections have no biases");
  j = minimal();
  j["hidden_act"] = "gelu";
  EXPECT_INPUT_ERROR(parse(j), "cfg.json: hidden_act='gelu' is not supported");
  j = minimal();
  j["attention_dropout"] = 0.1;
  EXPECT_INPUT_ERROR(parse(j), "cfg.json: attention_dropout=0.1 is not supported");
  j = minimal();
  j["architectures"] = {"BertForMaskedLM"};
  EXPECT_INPUT_ERROR(parse(j), "cfg.json: architectures=[\"BertForMaskedLM\"] names none of LlamaForCausalLM");
  j["architectures"] = "LlamaForCausalLM";
  EXPECT_INPUT_ERROR(parse(j), "field 'architectures' must be a list of strings, got string");
  j = minimal();
  j["model_type"] = "gemma";
  EXPECT_INPUT_ERROR(parse(j),
                     "cfg.json: model_type='gemma' is not supported (supported: llama, qwen2, qwen3, mistral, gpt2)");
  j["model_type"] = "mistral";
  j["architectures"] = {"LlamaForCausalLM", "Other"};  // a known class, but not model_type's
  EXPECT_INPUT_ERROR(parse(j), "does not match model_type='mistral'");
  j = minimal();
  j["sliding_window"] = 16;  // not a llama key: transformers' Llama would ignore it silently
  EXPECT_INPUT_ERROR(parse(j), "sliding_window / layer_types are not llama keys");
  j = minimal();
  j["model_type"] = "qwen2";
  j["use_mrope"] = true;
  EXPECT_INPUT_ERROR(parse(j), "use_mrope=true is not supported by seqpar's qwen2");
  j["use_mrope"] = false;  // as Qwen2.5's published config.json has it
  EXPECT_NO_THROW(parse(j));
}

// Llama's own attention_bias: biases on q, k, v and o.
TEST(HfConfig, LlamaAttentionBias) {
  json j = minimal();
  j["attention_bias"] = true;
  const LlamaConfig c = parse(j);
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_TRUE(c.o_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_EQ(c.layer_window(0), 0);
}

TEST(HfConfig, Qwen2BiasesAndTheLayersItsWindowCovers) {
  json j = minimal();
  j["model_type"] = "qwen2";
  j["architectures"] = {"Qwen2ForCausalLM"};
  j["num_hidden_layers"] = 4;
  LlamaConfig c = parse(j);
  EXPECT_EQ(c.family, ModelFamily::kQwen2);
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_FALSE(c.o_bias);
  for (int l = 0; l < 4; ++l) EXPECT_EQ(c.layer_window(l), 0) << "use_sliding_window defaults to false";
  j["sliding_window"] = 32;
  j["max_window_layers"] = 2;
  EXPECT_EQ(parse(j).layer_window(3), 0) << "a window without use_sliding_window is ignored, as transformers does";
  j["use_sliding_window"] = true;
  c = parse(j);
  EXPECT_EQ(c.layer_window(0), 0);
  EXPECT_EQ(c.layer_window(1), 0);
  EXPECT_EQ(c.layer_window(2), 32) << "layers >= max_window_layers slide";
  EXPECT_EQ(c.layer_window(3), 32);
  j["layer_types"] = {"sliding_attention", "full_attention", "sliding_attention", "full_attention"};
  c = parse(j);  // layer_types wins over max_window_layers
  EXPECT_EQ(c.layer_window(0), 32);
  EXPECT_EQ(c.layer_window(1), 0);
  EXPECT_EQ(c.layer_window(2), 32);
  j["layer_types"] = {"sliding_attention", "chunked_attention", "full_attention", "full_attention"};
  EXPECT_INPUT_ERROR(parse(j), "layer_types[1]='chunked_attention' is not supported");
  j["layer_types"] = {"full_attention"};
  EXPECT_INPUT_ERROR(parse(j), "layer_types must be a list of num_hidden_layers=4 strings");
  j.erase("layer_types");
  j["sliding_window"] = 0;
  EXPECT_INPUT_ERROR(parse(j), "sliding_window=0 must be null or >= 1");
  j["sliding_window"] = nullptr;  // use_sliding_window with no window: full attention
  EXPECT_EQ(parse(j).layer_window(3), 0);
  j = minimal();
  j["model_type"] = "qwen2";
  j["attention_bias"] = true;
  EXPECT_INPUT_ERROR(parse(j), "attention_bias is not a qwen2 key");
}

TEST(HfConfig, Qwen3NormsHeadDimAndBias) {
  json j = minimal();
  j["model_type"] = "qwen3";
  LlamaConfig c = parse(j);
  EXPECT_EQ(c.family, ModelFamily::kQwen3);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_EQ(c.head_dim, 128) << "Qwen3Config's default head_dim, not hidden / heads = 4";
  j["head_dim"] = 8;
  j["attention_bias"] = true;
  c = parse(j);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_TRUE(c.o_bias);
}

TEST(HfConfig, MistralWindowOnEveryLayer) {
  json j = minimal();
  j["model_type"] = "mistral";
  j["head_dim"] = 8;
  j["sliding_window"] = 4096;
  LlamaConfig c = parse(j);
  EXPECT_EQ(c.family, ModelFamily::kMistral);
  EXPECT_FALSE(c.qkv_bias || c.o_bias || c.qk_norm);
  EXPECT_EQ(c.layer_window(0), 4096);
  EXPECT_EQ(c.layer_window(1), 4096);
  EXPECT_EQ(c.head_dim, 8);
  j["sliding_window"] = nullptr;
  EXPECT_EQ(parse(j).layer_window(0), 0) << "null: full causal";
  j["attention_bias"] = true;
  EXPECT_INPUT_ERROR(parse(j), "attention_bias=true is not supported for mistral");
}

// Every family's config.json as seqpar writes it reads back the same, windows included, and
// names the family's class.
TEST(HfConfig, FamiliesRoundTrip) {
  for (const char* preset : {"qwen2.5-1.5b", "qwen3-1.7b", "qwen3-8b", "mistral-7b", "llama-3.2-1b"}) {
    LlamaConfig c = llama_preset(preset);
    if (c.family == ModelFamily::kQwen2) {  // a windowed variant: layers >= 20 slide
      c.use_sliding_window = true;
      c.sliding_window = 1024;
      c.max_window_layers = 20;
      c.sliding_layers.assign(static_cast<size_t>(c.num_layers), false);
      for (int64_t l = 20; l < c.num_layers; ++l) c.sliding_layers[static_cast<size_t>(l)] = true;
    }
    const std::string text = hf_llama_config_json(c);
    const json j = json::parse(text);
    EXPECT_EQ(j["model_type"], model_family_name(c.family)) << preset;
    EXPECT_EQ(j["architectures"][0], model_family_architecture(c.family)) << preset;
    const LlamaConfig back = parse_hf_llama_config(text, preset);
    EXPECT_EQ(back.family, c.family) << preset;
    EXPECT_EQ(back.qkv_bias, c.qkv_bias) << preset;
    EXPECT_EQ(back.o_bias, c.o_bias) << preset;
    EXPECT_EQ(back.qk_norm, c.qk_norm) << preset;
    EXPECT_EQ(back.head_dim, c.head_dim) << preset;
    for (int64_t l = 0; l < c.num_layers; ++l) EXPECT_EQ(back.layer_window(l), c.layer_window(l)) << preset << l;
  }
}

void expect_same(const LlamaConfig& a, const LlamaConfig& b) {
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.hidden_size, b.hidden_size);
  EXPECT_EQ(a.intermediate_size, b.intermediate_size);
  EXPECT_EQ(a.num_layers, b.num_layers);
  EXPECT_EQ(a.num_heads, b.num_heads);
  EXPECT_EQ(a.num_kv_heads, b.num_kv_heads);
  EXPECT_EQ(a.head_dim, b.head_dim);
  EXPECT_EQ(a.rms_norm_eps, b.rms_norm_eps);  // exact: JSON doubles round-trip
  EXPECT_EQ(a.max_position_embeddings, b.max_position_embeddings);
  EXPECT_EQ(a.tie_word_embeddings, b.tie_word_embeddings);
  EXPECT_EQ(a.rope.type, b.rope.type);
  EXPECT_EQ(a.rope.theta, b.rope.theta);
  if (a.rope.type == "llama3") {
    EXPECT_EQ(a.rope.factor, b.rope.factor);
    EXPECT_EQ(a.rope.low_freq_factor, b.rope.low_freq_factor);
    EXPECT_EQ(a.rope.high_freq_factor, b.rope.high_freq_factor);
    EXPECT_EQ(a.rope.original_max_position_embeddings, b.rope.original_max_position_embeddings);
  }
}

TEST(HfConfig, RoundTrip) {
  LlamaConfig c;
  c.vocab_size = 97;
  c.hidden_size = 48;
  c.intermediate_size = 80;
  c.num_layers = 3;
  c.num_heads = 6;
  c.num_kv_heads = 2;
  c.head_dim = 10;
  c.rms_norm_eps = 1.0 / 3.0 * 1e-5;
  c.max_position_embeddings = 65536;
  c.tie_word_embeddings = true;
  c.rope.theta = 123456.789;
  expect_same(parse_hf_llama_config(hf_llama_config_json(c), "rt"), c);

  c.rope.type = "llama3";
  c.rope.factor = 16.0;
  c.rope.low_freq_factor = 0.5;
  c.rope.high_freq_factor = 3.25;
  c.rope.original_max_position_embeddings = 4096;
  const std::string text = hf_llama_config_json(c, "bfloat16");
  expect_same(parse_hf_llama_config(text, "rt"), c);

  // What transformers needs to find in it (4.x and 5.x keys).
  json j = json::parse(text);
  EXPECT_EQ(j["architectures"], json::array({"LlamaForCausalLM"}));
  EXPECT_EQ(j["model_type"], "llama");
  EXPECT_EQ(j["torch_dtype"], "bfloat16");
  EXPECT_EQ(j["dtype"], "bfloat16");
  EXPECT_EQ(j["hidden_act"], "silu");
  EXPECT_EQ(j["rope_theta"], 123456.789);
  EXPECT_EQ(j["rope_parameters"]["rope_theta"], 123456.789);
  EXPECT_EQ(j["rope_parameters"]["rope_type"], "llama3");
  EXPECT_EQ(j["rope_scaling"]["factor"], 16.0);
  EXPECT_EQ(j["num_hidden_layers"], 3);

  // The two spellings alone each parse back to the same config.
  json only5 = j;
  only5.erase("rope_theta");
  only5.erase("rope_scaling");
  expect_same(parse(only5), c);
  json only4 = j;
  only4.erase("rope_parameters");
  expect_same(parse(only4), c);

  // And it goes to disk like the checkpoint writer will put it.
  const std::string dir = testing::temp_dir();
  write_file_atomic(dir + "/config.json", text);
  expect_same(load_hf_llama_config(dir), c);
}

TEST(HfConfig, WriterRefusesInvalidConfigs) {
  LlamaConfig c = parse(minimal());
  EXPECT_INPUT_ERROR(hf_llama_config_json(c, "int8"), "torch_dtype='int8' is not supported");
  c.num_kv_heads = 3;
  EXPECT_INPUT_ERROR(hf_llama_config_json(c), "num_attention_heads=4 must be a multiple of num_key_value_heads=3");
}

// ---- gpt2 (GPT2LMHeadModel) ----------------------------------------------------------------

// GPT2Config as transformers 5.x saves it (tests/fixtures/hf/gpt2_gelu_new/config.json's keys).
json gpt2_minimal() {
  return {{"architectures", {"GPT2LMHeadModel"}},
          {"model_type", "gpt2"},
          {"vocab_size", 96},
          {"n_embd", 32},
          {"n_layer", 2},
          {"n_head", 4},
          {"n_positions", 64},
          {"n_inner", nullptr},
          {"activation_function", "gelu_new"},
          {"layer_norm_epsilon", 1e-05},
          {"scale_attn_weights", true},
          {"scale_attn_by_inverse_layer_idx", false},
          {"reorder_and_upcast_attn", false},
          {"add_cross_attention", false},
          {"tie_word_embeddings", true},
          {"resid_pdrop", 0.1},
          {"summary_type", "cls_index"}};
}

TEST(HfConfig, Gpt2AsTransformersWritesIt) {
  const LlamaConfig c = parse(gpt2_minimal());
  EXPECT_EQ(c.family, ModelFamily::kGpt2);
  EXPECT_EQ(c.vocab_size, 96);
  EXPECT_EQ(c.hidden_size, 32);
  EXPECT_EQ(c.num_layers, 2);
  EXPECT_EQ(c.num_heads, 4);
  EXPECT_EQ(c.num_kv_heads, 4);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.intermediate_size, 128);  // n_inner null: 4 * n_embd
  EXPECT_EQ(c.max_position_embeddings, 64);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_EQ(c.norm, NormKind::kLayerNorm);
  EXPECT_TRUE(c.norm_bias);
  EXPECT_EQ(c.positions, PositionKind::kLearned);
  EXPECT_EQ(c.mlp, MlpKind::kGelu);
  EXPECT_EQ(c.gelu, GeluForm::kTanh);
  EXPECT_TRUE(c.mlp_bias && c.qkv_bias && c.o_bias && c.tie_word_embeddings && !c.qk_norm);
  json j = gpt2_minimal();
  j["n_inner"] = 48;
  j["activation_function"] = "gelu";
  j.erase("layer_norm_epsilon");
  const LlamaConfig e = parse(j);
  EXPECT_EQ(e.intermediate_size, 48);
  EXPECT_EQ(e.gelu, GeluForm::kErf);
  EXPECT_DOUBLE_EQ(e.rms_norm_eps, 1e-5);  // GPT2Config's default
  j["activation_function"] = "gelu_pytorch_tanh";
  EXPECT_EQ(parse(j).gelu, GeluForm::kTanh);
  // The committed fixtures, as transformers wrote them.
  for (const char* name : {"gpt2_gelu_new", "gpt2_gelu_erf", "gpt2_near_positions", "gpt2_d64"}) {
    const LlamaConfig f = load_hf_llama_config(testing::source_path(std::string("tests/fixtures/hf/") + name));
    EXPECT_EQ(f.family, ModelFamily::kGpt2) << name;
  }
}

TEST(HfConfig, Gpt2RefusesWhatSeqparsGpt2IsNot) {
  auto with = [](const char* key, json value) {
    json j = gpt2_minimal();
    j[key] = std::move(value);
    return j;
  };
  EXPECT_INPUT_ERROR(parse(with("scale_attn_by_inverse_layer_idx", true)),
                     "cfg.json: scale_attn_by_inverse_layer_idx=true is not supported by seqpar's gpt2");
  EXPECT_INPUT_ERROR(parse(with("reorder_and_upcast_attn", true)),
                     "cfg.json: reorder_and_upcast_attn=true is not supported by seqpar's gpt2");
  EXPECT_INPUT_ERROR(parse(with("add_cross_attention", true)), "add_cross_attention=true is not supported");
  EXPECT_INPUT_ERROR(parse(with("scale_attn_weights", false)), "scale_attn_weights=false is not supported");
  EXPECT_INPUT_ERROR(parse(with("tie_word_embeddings", false)), "tie_word_embeddings=false is not supported");
  EXPECT_INPUT_ERROR(parse(with("activation_function", "relu")),
                     "activation_function='relu' is not supported (supported: gelu, gelu_new, gelu_pytorch_tanh)");
  EXPECT_INPUT_ERROR(parse(with("n_embd", 30)), "n_embd=30 must be a multiple of n_head=4");
  EXPECT_INPUT_ERROR(parse(with("n_positions", 0)), "max_position_embeddings=0 must be positive");
  json j = gpt2_minimal();
  j.erase("n_positions");
  EXPECT_INPUT_ERROR(parse(j), "field 'n_positions' is missing");
}

TEST(HfConfig, Gpt2RoundTrip) {
  for (const char* act : {"gelu_new", "gelu", "gelu_pytorch_tanh"}) {
    json j = gpt2_minimal();
    j["activation_function"] = act;
    j["n_inner"] = 40;
    const LlamaConfig c = parse(j);
    const json written = json::parse(hf_llama_config_json(c, "bfloat16"));
    EXPECT_EQ(written["model_type"], "gpt2");
    EXPECT_EQ(written["architectures"], json({"GPT2LMHeadModel"}));
    EXPECT_EQ(written["activation_function"], act);
    EXPECT_EQ(written["n_inner"], 40);
    EXPECT_EQ(written["dtype"], "bfloat16");
    const LlamaConfig back = parse(written);
    EXPECT_EQ(back.intermediate_size, 40);
    EXPECT_EQ(back.activation_function, act);
    EXPECT_EQ(back.gelu, c.gelu);
    EXPECT_EQ(back.max_position_embeddings, c.max_position_embeddings);
    EXPECT_DOUBLE_EQ(back.rms_norm_eps, c.rms_norm_eps);
  }
}

// Real config.json files as the Hugging Face hub publishes them (tests/fixtures/hub_configs,
// README.md there says where each came from): every supported checkpoint loads with its published
// shape, every other architecture is refused by name. Every directory there must be listed below.
TEST(HfConfig, RealHubConfigsLoadOrAreRefusedByName) {
  struct Loads {
    const char* dir;
    ModelFamily family;
    int64_t layers, heads, kv_heads, head_dim, vocab;
    bool tie;
    int64_t window;  // on every layer (0: none)
    double rope_theta;  // 0: learned positions (gpt2)
    const char* rope_type;
  };
  const ModelFamily llama = ModelFamily::kLlama, qwen2 = ModelFamily::kQwen2, qwen3 = ModelFamily::kQwen3,
                    mistral = ModelFamily::kMistral, gpt2 = ModelFamily::kGpt2;
  const Loads loads[] = {
      {"meta-llama__Llama-3.2-1B", llama, 16, 32, 8, 64, 128256, true, 0, 500000.0, "llama3"},
      {"meta-llama__Llama-3.2-3B-Instruct", llama, 28, 24, 8, 128, 128256, true, 0, 500000.0, "llama3"},
      {"meta-llama__Llama-3.1-8B-Instruct", llama, 32, 32, 8, 128, 128256, false, 0, 500000.0, "llama3"},
      {"meta-llama__Llama-2-7b-hf", llama, 32, 32, 32, 128, 32000, false, 0, 10000.0, "default"},
      {"TinyLlama__TinyLlama-1.1B-Chat-v1.0", llama, 22, 32, 4, 64, 32000, false, 0, 10000.0, "default"},
      {"codellama__CodeLlama-7b-hf", llama, 32, 32, 32, 128, 32016, false, 0, 1000000.0, "default"},
      {"deepseek-ai__DeepSeek-R1-Distill-Llama-8B", llama, 32, 32, 8, 128, 128256, false, 0, 500000.0, "llama3"},
      {"Qwen__Qwen2.5-0.5B", qwen2, 24, 14, 2, 64, 151936, true, 0, 1000000.0, "default"},
      {"Qwen__Qwen2.5-7B-Instruct", qwen2, 28, 28, 4, 128, 152064, false, 0, 1000000.0, "default"},
      {"Qwen__Qwen2.5-14B-Instruct", qwen2, 48, 40, 8, 128, 152064, false, 0, 1000000.0, "default"},
      {"Qwen__Qwen2-1.5B", qwen2, 28, 12, 2, 128, 151936, true, 0, 1000000.0, "default"},
      {"Qwen__Qwen2.5-7B-Instruct-1M", qwen2, 28, 28, 4, 128, 152064, false, 0, 10000000.0, "default"},
      {"deepseek-ai__DeepSeek-R1-Distill-Qwen-1.5B", qwen2, 28, 12, 2, 128, 151936, false, 0, 10000.0, "default"},
      {"Qwen__Qwen3-0.6B", qwen3, 28, 16, 8, 128, 151936, true, 0, 1000000.0, "default"},
      {"Qwen__Qwen3-4B", qwen3, 36, 32, 8, 128, 151936, true, 0, 1000000.0, "default"},
      {"Qwen__Qwen3-8B", qwen3, 36, 32, 8, 128, 151936, false, 0, 1000000.0, "default"},
      {"mistralai__Mistral-7B-v0.1", mistral, 32, 32, 8, 128, 32000, false, 4096, 10000.0, "default"},
      {"mistralai__Mistral-7B-Instruct-v0.2", mistral, 32, 32, 8, 128, 32000, false, 0, 1000000.0, "default"},
      {"mistralai__Mistral-7B-Instruct-v0.3", mistral, 32, 32, 8, 128, 32768, false, 0, 1000000.0, "default"},
      {"mistralai__Mistral-Nemo-Base-2407", mistral, 40, 32, 8, 128, 131072, false, 0, 1000000.0, "default"},
      {"openai-community__gpt2", gpt2, 12, 12, 12, 64, 50257, true, 0, 0.0, ""},
      {"openai-community__gpt2-medium", gpt2, 24, 16, 16, 64, 50257, true, 0, 0.0, ""},
      {"openai-community__gpt2-xl", gpt2, 48, 25, 25, 64, 50257, true, 0, 0.0, ""},
      {"distilbert__distilgpt2", gpt2, 6, 12, 12, 64, 50257, true, 0, 0.0, ""},
  };
  // The architectures seqpar does not implement: refused by their model_type.
  const std::pair<const char*, const char*> refused[] = {
      {"Qwen__Qwen3-30B-A3B", "model_type='qwen3_moe' is not supported"},
      {"mistralai__Mixtral-8x7B-v0.1", "model_type='mixtral' is not supported"},
      {"google__gemma-2b", "model_type='gemma' is not supported"},
      {"microsoft__Phi-3-mini-4k-instruct", "model_type='phi3' is not supported"},
  };
  const std::string root = testing::source_path("tests/fixtures/hub_configs/");
  std::set<std::string> listed;
  for (const Loads& m : loads) {
    SCOPED_TRACE(m.dir);
    listed.insert(m.dir);
    LlamaConfig c;
    ASSERT_NO_THROW(c = load_hf_llama_config(root + m.dir));
    EXPECT_EQ(c.family, m.family);
    EXPECT_EQ(c.num_layers, m.layers);
    EXPECT_EQ(c.num_heads, m.heads);
    EXPECT_EQ(c.num_kv_heads, m.kv_heads);
    EXPECT_EQ(c.head_dim, m.head_dim);
    EXPECT_EQ(c.vocab_size, m.vocab);
    EXPECT_EQ(c.tie_word_embeddings, m.tie);
    for (int64_t l = 0; l < c.num_layers; ++l) EXPECT_EQ(c.layer_window(l), m.window) << "layer " << l;
    if (m.rope_theta > 0) {
      EXPECT_EQ(c.positions, PositionKind::kRope);
      EXPECT_DOUBLE_EQ(c.rope.theta, m.rope_theta);
      EXPECT_EQ(c.rope.type, m.rope_type);
    } else {
      EXPECT_EQ(c.positions, PositionKind::kLearned);
      EXPECT_EQ(c.max_position_embeddings, 1024);  // n_positions
    }
  }
  for (const auto& [dir, message] : refused) {
    SCOPED_TRACE(dir);
    listed.insert(dir);
    EXPECT_INPUT_ERROR(load_hf_llama_config(root + dir), message);
  }
  for (const auto& e : std::filesystem::directory_iterator(root)) {
    if (e.is_directory()) {
      EXPECT_TRUE(listed.count(e.path().filename().string())) << e.path() << " is not checked by this test";
    }
  }
}

}  // namespace
}  // namespace seqpar
