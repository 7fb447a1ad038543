// LlamaConfig::validate and rope_inv_freq (arch/llama_config.h).
#include <gtest/gtest.h>

#include <cmath>

#include "arch/llama_config.h"
#include "io/io_test_util.h"  // EXPECT_INPUT_ERROR (a header of core/ only)

namespace seqpar {
namespace {

LlamaConfig small() {
  LlamaConfig c;
  c.vocab_size = 32;
  c.hidden_size = 16;
  c.intermediate_size = 48;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 4;
  return c;
}

double rel(double got, double want) { return std::abs(got - want) / std::abs(want); }

TEST(LlamaConfig, ValidAcceptsGoodConfigs) {
  LlamaConfig c = small();
  EXPECT_NO_THROW(c.validate());
  c.rope.type = "llama3";
  c.rope.factor = 8;
  EXPECT_NO_THROW(c.validate());
}

TEST(LlamaConfig, EverySizeMustBePositive) {
  struct Case {
    int64_t LlamaConfig::*field;
    const char* name;
  };
  for (Case k :
       {Case{&LlamaConfig::vocab_size, "vocab_size"}, Case{&LlamaConfig::hidden_size, "hidden_size"},
        Case{&LlamaConfig::intermediate_size, "intermediate_size"}, Case{&LlamaConfig::num_layers, "num_hidden_layers"},
        Case{&LlamaConfig::num_heads, "num_attention_heads"}, Case{&LlamaConfig::num_kv_heads, "num_key_value_heads"},
        Case{&LlamaConfig::head_dim, "head_dim"},
        Case{&LlamaConfig::max_position_embeddings, "max_position_embeddings"}}) {
    for (int64_t bad : {0, -3}) {
      LlamaConfig c = small();
      c.*k.field = bad;
      EXPECT_INPUT_ERROR(c.validate(), fmt::format("{}={} must be positive", k.name, bad));
    }
  }
}

TEST(LlamaConfig, Rules) {
  LlamaConfig c = small();
  c.num_heads = 6;
  c.num_kv_heads = 4;
  EXPECT_INPUT_ERROR(c.validate(), "num_attention_heads=6 must be a multiple of num_key_value_heads=4");
  c = small();
  c.num_kv_heads = 8;  // more KV heads than query heads
  EXPECT_INPUT_ERROR(c.validate(), "num_attention_heads=4 must be a multiple of num_key_value_heads=8");
  c = small();
  c.head_dim = 3;
  EXPECT_INPUT_ERROR(c.validate(), "head_dim=3 must be even (RoPE rotates pairs of dimensions)");
  c = small();
  c.rms_norm_eps = 0;
  EXPECT_INPUT_ERROR(c.validate(), "rms_norm_eps=0 must be a positive finite number");
  c.rms_norm_eps = NAN;
  EXPECT_INPUT_ERROR(c.validate(), "rms_norm_eps=nan must be a positive finite number");
  c = small();
  c.rope.theta = -1;
  EXPECT_INPUT_ERROR(c.validate(), "rope_theta=-1 must be a positive finite number");
  c = small();
  c.rope.type = "ntk";
  EXPECT_INPUT_ERROR(c.validate(),
                     "rope_type='ntk' is not supported (supported: default, linear, dynamic, llama3, yarn, longrope)");
  c = small();
  c.rope.type = "longrope";
  c.rope.original_max_position_embeddings = 16;
  c.rope.short_factor.assign(static_cast<size_t>(c.head_dim / 2), 1.0);
  c.rope.long_factor.assign(static_cast<size_t>(c.head_dim / 2) + 1, 2.0);
  EXPECT_INPUT_ERROR(c.validate(), fmt::format("rope long_factor has {} entries but must have head_dim / 2 = {}",
                                               c.head_dim / 2 + 1, c.head_dim / 2));
  c.rope.long_factor.pop_back();
  EXPECT_NO_THROW(c.validate());
  c.rope.original_max_position_embeddings = 1;
  EXPECT_INPUT_ERROR(c.validate(), "rope original_max_position_embeddings=1 must be > 1 (rope_type=longrope");
}

// A training length beyond what the config's RoPE covers is a warning text (the trainer logs it).
TEST(LlamaConfig, RopeLengthWarning) {
  LlamaConfig c = small();
  c.max_position_embeddings = 1024;
  EXPECT_EQ(rope_length_warning(c, 1024), "");
  EXPECT_NE(rope_length_warning(c, 1025).find("seq_len=1025 is longer than the model's max_position_embeddings=1024 "
                                              "and its config has no rope scaling"),
            std::string::npos);
  c.rope.type = "linear";
  c.rope.factor = 4;
  EXPECT_EQ(rope_covered_length(c), 4096);
  EXPECT_EQ(rope_length_warning(c, 4096), "");
  EXPECT_NE(rope_length_warning(c, 4097).find("seq_len=4097 is longer than the 4096 tokens the model's rope scaling "
                                              "covers (rope_type=linear, factor=4"),
            std::string::npos);
  c.rope.type = "dynamic";
  EXPECT_EQ(rope_length_warning(c, int64_t{1} << 40), "");
  c.rope.type = "yarn";
  c.rope.original_max_position_embeddings = 512;
  EXPECT_EQ(rope_covered_length(c), 2048);  // factor 4 * original 512
  c.rope.factor = 1;
  EXPECT_EQ(rope_covered_length(c), 1024);  // never below max_position_embeddings
  make_gpt2(c, "gelu_new");                 // learned positions: check_positions' error, not a RoPE warning
  EXPECT_EQ(rope_length_warning(c, 1 << 20), "");
}

TEST(LlamaConfig, Llama3Rules) {
  LlamaConfig c = small();
  c.rope.type = "llama3";
  c.rope.factor = 0.5;
  EXPECT_INPUT_ERROR(c.validate(), "rope factor=0.5 must be a finite number >= 1 (rope_type=llama3)");
  c.rope.factor = 8;
  c.rope.low_freq_factor = 4;
  c.rope.high_freq_factor = 4;
  EXPECT_INPUT_ERROR(c.validate(), "rope low_freq_factor=4 must be less than high_freq_factor=4");
  c.rope.low_freq_factor = 0;
  EXPECT_INPUT_ERROR(c.validate(), "rope low_freq_factor=0 must be positive");
  c.rope.low_freq_factor = 1;
  c.rope.original_max_position_embeddings = 0;
  EXPECT_INPUT_ERROR(c.validate(), "rope original_max_position_embeddings=0 must be positive");
  // rope_inv_freq refuses the same things.
  EXPECT_INPUT_ERROR(rope_inv_freq(c), "original_max_position_embeddings=0 must be positive");
}

TEST(RopeInvFreq, DefaultByHand) {
  // theta = 10000, D = 8: inv_freq[i] = 10000^(-2i/8) = 10^-i.
  LlamaConfig c = small();
  c.head_dim = 8;
  std::vector<float> f = rope_inv_freq(c);
  ASSERT_EQ(f.size(), 4u);
  const double want[4] = {1.0, 0.1, 0.01, 0.001};
  for (int i = 0; i < 4; ++i) EXPECT_LT(rel(f[i], want[i]), 1e-7) << i;
}

TEST(RopeInvFreq, Llama3ByHand) {
  // theta = 10000, D = 4: base inv_freq = [1, 0.01], wavelengths 2*pi and 200*pi = 628.3.
  LlamaConfig c = small();
  c.rope.type = "llama3";
  c.rope.factor = 8;
  c.rope.low_freq_factor = 1;
  c.rope.high_freq_factor = 4;
  // old context 1000: thresholds 1000 (low) and 250 (high); 628.3 is in between, so
  // smooth = (1000 / 628.3185 - 1) / (4 - 1) = 0.19718314 and
  // inv = (1 - smooth) * 0.01 / 8 + smooth * 0.01 = 0.0029753525; 2*pi < 250 keeps 1.
  c.rope.original_max_position_embeddings = 1000;
  std::vector<float> f = rope_inv_freq(c);
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f[0], 1.0f);
  EXPECT_LT(rel(f[1], 0.002975352506846947), 1e-7);
  // old context 500: 628.3 > 500, so the low frequency is divided by the factor.
  c.rope.original_max_position_embeddings = 500;
  f = rope_inv_freq(c);
  EXPECT_EQ(f[0], 1.0f);
  EXPECT_LT(rel(f[1], 0.01 / 8), 1e-7);
  // old context 4000: thresholds 4000 and 1000; 628.3 < 1000, so it is kept.
  c.rope.original_max_position_embeddings = 4000;
  f = rope_inv_freq(c);
  EXPECT_LT(rel(f[1], 0.01), 1e-7);
}

TEST(RopeInvFreq, Llama31MatchesTransformers) {
  // Llama-3.1-8B: theta 500000, D 128, factor 8, low 1, high 4, old context 8192. Reference:
  // transformers 5.24 `_compute_llama3_parameters` (float32 torch ops), printed with repr().
  // Indices cover the three bands: kept (< 29), smoothed (29..34), divided (>= 35).
  LlamaConfig c = small();
  c.num_heads = 32;
  c.num_kv_heads = 8;
  c.hidden_size = 4096;
  c.head_dim = 128;
  c.rope.theta = 500000.0;
  c.rope.type = "llama3";
  c.rope.factor = 8;
  c.rope.low_freq_factor = 1;
  c.rope.high_freq_factor = 4;
  c.rope.original_max_position_embeddings = 8192;
  std::vector<float> f = rope_inv_freq(c);
  ASSERT_EQ(f.size(), 64u);
  const std::pair<int, double> hf[] = {
      {0, 1.0},
      {1, 0.8146172165870667},
      {13, 0.06956595182418823},
      {28, 0.0032114461064338684},
      {29, 0.0021665706299245358},
      {30, 0.0013718936825171113},
      {32, 0.0005248460220173001},
      {34, 0.0001785077911335975},
      {35, 9.556212171446532e-05},
      {47, 8.160727702488657e-06},
      {63, 3.068925877869333e-07},
  };
  for (auto [i, want] : hf) EXPECT_LT(rel(f[i], want), 1e-6) << "inv_freq[" << i << "] = " << f[i];
  // Monotone decreasing, as every band keeps the order.
  for (size_t i = 1; i < f.size(); ++i) EXPECT_LT(f[i], f[i - 1]) << i;
}

}  // namespace
}  // namespace seqpar

namespace seqpar {
namespace {

// The families' presets carry their published config.json shapes and options.
TEST(LlamaPreset, FamiliesHaveTheirPublishedShapes) {
  const LlamaConfig q25 = llama_preset("qwen2.5-1.5b");
  EXPECT_EQ(q25.family, ModelFamily::kQwen2);
  EXPECT_TRUE(q25.qkv_bias && !q25.o_bias && !q25.qk_norm);
  EXPECT_EQ(q25.hidden_size, 1536);
  EXPECT_EQ(q25.num_heads, 12);
  EXPECT_EQ(q25.num_kv_heads, 2);
  EXPECT_EQ(q25.head_dim, 128);
  EXPECT_EQ(q25.layer_window(27), 0);
  const LlamaConfig q3 = llama_preset("qwen3-8b");
  EXPECT_EQ(q3.family, ModelFamily::kQwen3);
  EXPECT_TRUE(q3.qk_norm && !q3.qkv_bias);
  EXPECT_EQ(q3.num_layers, 36);
  EXPECT_EQ(q3.intermediate_size, 12288);
  const LlamaConfig q3s = llama_preset("qwen3-1.7b");
  EXPECT_EQ(q3s.num_heads, 16);
  EXPECT_TRUE(q3s.tie_word_embeddings);
  const LlamaConfig m = llama_preset("mistral-7b");
  EXPECT_EQ(m.family, ModelFamily::kMistral);
  EXPECT_EQ(m.vocab_size, 32000);
  for (int64_t l = 0; l < m.num_layers; ++l) EXPECT_EQ(m.layer_window(l), 4096);
  for (const std::string& name : llama_preset_names()) EXPECT_NO_THROW(llama_preset(name).validate()) << name;
  EXPECT_THROW(llama_preset("qwen9"), InputError);
}

// Megatron-DeepSpeed's sequence-parallel GPT scripts' sizes, and the GPT family's rules.
TEST(LlamaPreset, GptPresetsHaveMegatronsShapes) {
  const LlamaConfig g = llama_preset("gpt-1.3b-32k");
  EXPECT_EQ(g.family, ModelFamily::kGpt2);
  EXPECT_EQ(g.num_layers, 24);
  EXPECT_EQ(g.hidden_size, 2048);
  EXPECT_EQ(g.num_heads, 16);
  EXPECT_EQ(g.head_dim, 128);
  EXPECT_EQ(g.intermediate_size, 8192);
  EXPECT_EQ(g.max_position_embeddings, 32768);
  EXPECT_EQ(g.vocab_size, 50304);
  EXPECT_TRUE(g.tie_word_embeddings);
  EXPECT_EQ(g.positions, PositionKind::kLearned);
  EXPECT_EQ(g.norm, NormKind::kLayerNorm);
  EXPECT_EQ(g.mlp, MlpKind::kGelu);
  // The 128K variant differs only in its position table.
  LlamaConfig long_table = llama_preset("gpt-1.3b-128k");
  EXPECT_EQ(long_table.max_position_embeddings, 131072);
  EXPECT_EQ(long_table.num_layers, g.num_layers);
  EXPECT_EQ(long_table.hidden_size, g.hidden_size);
  EXPECT_EQ(long_table.num_heads, g.num_heads);
  EXPECT_EQ(long_table.intermediate_size, g.intermediate_size);
  EXPECT_EQ(long_table.vocab_size, g.vocab_size);
  EXPECT_EQ(long_table.positions, PositionKind::kLearned);
  const LlamaConfig b = llama_preset("gpt-30b-32k");
  EXPECT_EQ(b.num_layers, 64);
  EXPECT_EQ(b.hidden_size, 6144);
  EXPECT_EQ(b.num_heads, 64);
  EXPECT_EQ(b.head_dim, 96);
  EXPECT_EQ(b.intermediate_size, 24576);
  EXPECT_NO_THROW(g.check_positions(32768));
  EXPECT_INPUT_ERROR(g.check_positions(32769), "seq_len=32769 is longer than the model's n_positions=32768");
  EXPECT_NO_THROW(llama_preset("llama-3.2-1b").check_positions(int64_t{1} << 30));  // RoPE: no table
}

TEST(LlamaConfig, GptRules) {
  LlamaConfig c = small();
  c.num_kv_heads = c.num_heads;
  c.max_position_embeddings = 64;
  make_gpt2(c, "gelu");
  EXPECT_NO_THROW(c.validate());
  EXPECT_EQ(c.gelu, GeluForm::kErf);
  LlamaConfig bad = c;
  bad.tie_word_embeddings = false;
  EXPECT_INPUT_ERROR(bad.validate(), "a gpt2 model has LayerNorm with bias");
  bad = c;
  bad.activation_function = "gelu_fast";
  EXPECT_INPUT_ERROR(bad.validate(), "activation_function='gelu_fast' is not supported");
  bad = c;
  bad.max_position_embeddings = kMaxLearnedPositions + 1;
  EXPECT_INPUT_ERROR(bad.validate(), "the most rows seqpar accepts for a learned position embedding");
  LlamaConfig rms = small();
  rms.norm_bias = true;
  EXPECT_INPUT_ERROR(rms.validate(), "norm biases need LayerNorm");
}

}  // namespace
}  // namespace seqpar
