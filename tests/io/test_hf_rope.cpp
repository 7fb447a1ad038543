// rope_scaling types from config.json (linear, dynamic, llama3, yarn, longrope): the frequencies and
// attention factors against transformers' (tests/fixtures/rope/rope_frequencies.json, written by
// tools/make_rope_fixtures.py), the refusals with their messages, and export round trips.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "io/hf_config.h"
#include "io_test_util.h"
#include "test_util.h"

namespace seqpar {
namespace {

using nlohmann::json;

json fixture_cases() {
  std::ifstream in(testing::source_path("tests/fixtures/rope/rope_frequencies.json"));
  EXPECT_TRUE(in.is_open());
  std::stringstream ss;
  ss << in.rdbuf();
  return json::parse(ss.str()).at("cases");
}

// Relative error of f32 frequencies: torch computes them in f32 ops (pow, reciprocal, scaling),
// seqpar rounds the exponent as torch does and the rest once (arch/llama_config.cpp).
constexpr double kFreqTol = 5e-7;

TEST(HfRope, FrequenciesMatchTransformers) {
  const json cases = fixture_cases();
  ASSERT_GE(cases.size(), 17u);
  for (const json& k : cases) {
    const std::string name = k.at("name");
    SCOPED_TRACE(name);
    const LlamaConfig c = parse_hf_llama_config(k.at("config").dump(), name);
    const int64_t rope_len = k.at("rope_len");
    const std::vector<float> got = rope_inv_freq(c, rope_len);
    const std::vector<double> want = k.at("inv_freq");
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_NEAR(got[i], want[i], kFreqTol * std::abs(want[i])) << "inv_freq[" << i << "]";
    const double af = k.at("attention_factor");
    EXPECT_NEAR(rope_attention_factor(c), af, 1e-12 * af);
    EXPECT_EQ(rope_depends_on_length(c.rope), c.rope.type == "dynamic" || c.rope.type == "longrope");
  }
}

// What the length does: dynamic changes nothing up to max_position_embeddings, longrope switches to
// long_factor above original_max_position_embeddings; the others ignore it.
TEST(HfRope, LengthRules) {
  for (const json& k : fixture_cases()) {
    const std::string name = k.at("name");
    SCOPED_TRACE(name);
    const LlamaConfig c = parse_hf_llama_config(k.at("config").dump(), name);
    const std::vector<float> init = rope_inv_freq(c);
    if (c.rope.type == "dynamic") {
      EXPECT_EQ(rope_inv_freq(c, c.max_position_embeddings), init);
      EXPECT_NE(rope_inv_freq(c, c.max_position_embeddings + 1), init);
    } else if (c.rope.type == "longrope") {
      const int64_t orig = c.rope.original_max_position_embeddings;
      EXPECT_EQ(rope_inv_freq(c, orig), init);
      EXPECT_NE(rope_inv_freq(c, orig + 1), init);
    } else {
      EXPECT_EQ(rope_inv_freq(c, 1 << 30), init);
    }
  }
}

TEST(HfRope, ExportRoundTripKeepsTheFrequencies) {
  for (const json& k : fixture_cases()) {
    const std::string name = k.at("name");
    SCOPED_TRACE(name);
    const LlamaConfig c = parse_hf_llama_config(k.at("config").dump(), name);
    const std::string text = hf_llama_config_json(c);
    const LlamaConfig back = parse_hf_llama_config(text, "exported");
    const int64_t rope_len = k.at("rope_len");
    EXPECT_EQ(rope_inv_freq(back, rope_len), rope_inv_freq(c, rope_len));
    EXPECT_EQ(rope_inv_freq(back, int64_t{1} << 40), rope_inv_freq(c, int64_t{1} << 40));
    EXPECT_EQ(rope_attention_factor(back), rope_attention_factor(c));
    EXPECT_EQ(back.rope.type, c.rope.type);
    // Both spellings carry the same dict (5.x lets a non-empty rope_scaling replace rope_parameters).
    const json j = json::parse(text);
    if (c.rope.type != "default") {
      json params = j.at("rope_parameters");
      params.erase("rope_theta");
      EXPECT_EQ(params, j.at("rope_scaling"));
    }
  }
}

json small(json rope) {
  return {{"vocab_size", 32},
          {"hidden_size", 16},
          {"intermediate_size", 48},
          {"num_hidden_layers", 1},
          {"num_attention_heads", 2},
          {"max_position_embeddings", 64},
          {"rope_scaling", std::move(rope)}};
}

LlamaConfig parse(const json& j) { return parse_hf_llama_config(j.dump(), "cfg.json"); }

TEST(HfRope, RefusalsNameTheFieldTheValueAndTheRule) {
  EXPECT_INPUT_ERROR(parse(small({{"rope_type", "ntk"}, {"factor", 2.0}})),
                     "cfg.json: field 'rope_scaling.rope_type' = 'ntk' is not supported (supported rope types: "
                     "default, linear, dynamic, llama3, yarn, longrope)");
  EXPECT_INPUT_ERROR(parse(small({{"type", "proportional"}})), "field 'rope_scaling.type' = 'proportional'");
  // Missing required keys.
  for (const char* type : {"linear", "dynamic", "yarn"})
    EXPECT_INPUT_ERROR(parse(small({{"rope_type", type}})), "cfg.json: field 'rope_scaling.factor' is missing");
  EXPECT_INPUT_ERROR(parse(small({{"rope_type", "longrope"}, {"long_factor", {1, 1, 1, 1}}})),
                     "field 'rope_scaling.short_factor' is missing");
  // Bad values.
  EXPECT_INPUT_ERROR(parse(small({{"rope_type", "linear"}, {"factor", 0.0}})),
                     "cfg.json: rope factor=0 must be a positive finite number (rope_type=linear)");
  EXPECT_INPUT_ERROR(parse(small({{"rope_type", "dynamic"}, {"factor", -2.0}})),
                     "rope factor=-2 must be a positive finite number (rope_type=dynamic)");
  EXPECT_INPUT_ERROR(parse(small({{"rope_type", "yarn"}, {"factor", "4"}})),
                     "field 'rope_scaling.factor' must be a number, got string");
  EXPECT_INPUT_ERROR(parse(small({{"rope_type", "yarn"}, {"factor", 4.0}, {"attention_factor", 0.0}})),
                     "rope attention_factor=0 must be a positive finite number (rope_type=yarn)");
  EXPECT_INPUT_ERROR(parse(small({{"rope_type", "yarn"}, {"factor", 4.0}, {"beta_fast", -1.0}})),
                     "rope beta_fast=-1 and beta_slow=1 must be positive finite numbers (rope_type=yarn)");
  EXPECT_INPUT_ERROR(parse(small({{"rope_type", "yarn"}, {"factor", 4.0}, {"truncate", 1}})),
                     "field 'rope_scaling.truncate' must be true or false");
  EXPECT_INPUT_ERROR(parse(small({{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 0}})),
                     "rope original_max_position_embeddings=0 must be positive (rope_type=yarn)");
  // longrope lists: head_dim / 2 = 4 positive numbers each.
  json lr = {{"rope_type", "longrope"}, {"short_factor", {1, 1, 1}}, {"long_factor", {1, 2, 3, 4}}};
  EXPECT_INPUT_ERROR(parse(small(lr)),
                     "cfg.json: rope short_factor has 3 entries but must have head_dim / 2 = 4 (one per frequency; "
                     "rope_type=longrope)");
  lr["short_factor"] = {1, 1, 1, 1};
  lr["long_factor"] = {1, 2, 0, 4};
  EXPECT_INPUT_ERROR(parse(small(lr)), "rope long_factor[2]=0 must be a positive finite number");
  lr["long_factor"] = {1, 2, "x", 4};
  EXPECT_INPUT_ERROR(parse(small(lr)), "field 'rope_scaling.long_factor[2]' must be a number, got string");
  lr["long_factor"] = 2.0;
  EXPECT_INPUT_ERROR(parse(small(lr)), "field 'rope_scaling.long_factor' must be a list of numbers, got float 2.0");
  lr["long_factor"] = {1, 2, 3, 4};
  EXPECT_NO_THROW(parse(small(lr)));
  lr["attention_factor"] = -1.0;
  EXPECT_INPUT_ERROR(parse(small(lr)),
                     "rope attention_factor=-1 must be a positive finite number (rope_type=longrope)");
  // partial_rotary_factor stays refused.
  json j = small({{"rope_type", "linear"}, {"factor", 2.0}, {"partial_rotary_factor", 0.5}});
  EXPECT_INPUT_ERROR(parse(j), "partial_rotary_factor=0.5 is not supported");
}

TEST(HfRope, DefaultsAsTransformers) {
  // yarn: beta_fast / beta_slow 32 / 1 (0 counts as absent: transformers' `or`), truncate true,
  // a null factor is max_position_embeddings / original_max_position_embeddings.
  LlamaConfig c = parse(
      small({{"rope_type", "yarn"}, {"factor", nullptr}, {"original_max_position_embeddings", 16}, {"beta_fast", 0}}));
  EXPECT_DOUBLE_EQ(c.rope.factor, 4.0);
  EXPECT_DOUBLE_EQ(c.rope.beta_fast, 32.0);
  EXPECT_DOUBLE_EQ(c.rope.beta_slow, 1.0);
  EXPECT_TRUE(c.rope.truncate);
  EXPECT_FALSE(c.rope.attention_factor.has_value());
  // original_max_position_embeddings falls back to max_position_embeddings (64).
  c = parse(small({{"rope_type", "yarn"}, {"factor", 2.0}}));
  EXPECT_EQ(c.rope.original_max_position_embeddings, 64);
  // longrope without factor: max_position_embeddings / original.
  c = parse(small({{"rope_type", "longrope"},
                   {"original_max_position_embeddings", 8},
                   {"short_factor", {1, 1, 1, 1}},
                   {"long_factor", {1, 2, 3, 4}}}));
  EXPECT_DOUBLE_EQ(c.rope.factor, 8.0);
  EXPECT_DOUBLE_EQ(rope_attention_factor(c), std::sqrt(2.0));
}

}  // namespace
}  // namespace seqpar
