// The random init (init_llama_params): HF's normal(0, std) for weights, ones
// for norm weights, zeros for biases, GPT-2's scaled residual outputs; a
// function of the seed alone, and the bf16 copy a GPU run starts from is the
// rounding of the f32 one.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "train/trainer.h"

namespace seqpar {
namespace {

LlamaConfig small_config() {
  LlamaConfig c = demo_model_config();
  c.vocab_size = 1000;  // an embedding of 64000 elements: several threads fill it
  return c;
}

TEST(Init, NormalWeightsAndUnitNorms) {
  const LlamaConfig c = small_config();
  LlamaParams p = LlamaParams::zeros(c, DType::kF32, Device::cpu());
  init_llama_params(p, c, 7, 0.02f);
  for (auto& [name, t] : p.named()) {
    const float* v = t->data<float>();
    const int64_t n = t->numel();
    if (name.find("norm.weight") != std::string::npos) {
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(v[i], 1.f) << name << "[" << i << "]";
      continue;
    }
    double sum = 0, sq = 0;
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_TRUE(std::isfinite(v[i])) << name;
      sum += v[i];
      sq += static_cast<double>(v[i]) * v[i];
    }
    const double mean = sum / n, sd = std::sqrt(sq / n - mean * mean);
    // Normal(0, 0.02): the sample moments within a few standard errors.
    EXPECT_NEAR(mean, 0.0, 5 * 0.02 / std::sqrt(static_cast<double>(n))) << name;
    EXPECT_NEAR(sd, 0.02, 5 * 0.02 / std::sqrt(2.0 * n)) << name;
  }
}

// Sample mean and standard deviation of a tensor's values, for the moment checks.
std::pair<double, double> moments(const Tensor& t) {
  const float* v = t.data<float>();
  const int64_t n = t.numel();
  double sum = 0, sq = 0;
  for (int64_t i = 0; i < n; ++i) {
    sum += v[i];
    sq += static_cast<double>(v[i]) * v[i];
  }
  const double mean = sum / n;
  return {mean, std::sqrt(sq / n - mean * mean)};
}

// Biases start at 0 (q/k/v biases of Qwen2, every GPT-2 bias, LayerNorm's), as transformers' and
// Megatron's inits; GPT-2's residual outputs (attention o_proj and MLP down_proj, HF's c_proj) draw
// with std / sqrt(2 num_layers) (transformers' GPT2 and Megatron's output_layer_init_method); the
// Llama family scales nothing.
TEST(Init, BiasesAtZeroAndGptResidualOutputsScaled) {
  const float std = 0.05f;
  for (const bool gpt : {false, true}) {
    LlamaConfig c = small_config();
    c.num_layers = 3;
    if (gpt) {
      c.intermediate_size = 4 * c.hidden_size;
      make_gpt2(c, "gelu_new");
      c.max_position_embeddings = 256;
    } else {
      c.family = ModelFamily::kQwen2;
      c.qkv_bias = true;
    }
    c.validate();
    LlamaParams p = LlamaParams::zeros(c, DType::kF32, Device::cpu());
    init_llama_params(p, c, 11, std);
    int biases = 0, scaled = 0;
    for (auto& [name, t] : p.named()) {
      SCOPED_TRACE(name);
      const bool bias = name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
      if (name.find("norm.weight") != std::string::npos) continue;  // ones (NormalWeightsAndUnitNorms)
      const auto [mean, sd] = moments(*t);
      if (bias) {
        EXPECT_EQ(mean, 0.0);
        EXPECT_EQ(sd, 0.0);
        ++biases;
        continue;
      }
      const bool residual_out = name.find("o_proj.weight") != std::string::npos ||
                                name.find("down_proj.weight") != std::string::npos;
      const double want = gpt && residual_out ? std / std::sqrt(2.0 * c.num_layers) : std;
      scaled += gpt && residual_out;
      const double n = static_cast<double>(t->numel());
      EXPECT_NEAR(mean, 0.0, 5 * want / std::sqrt(n));
      EXPECT_NEAR(sd, want, 5 * want / std::sqrt(2.0 * n));
    }
    // Qwen2: q, k, v biases per layer; GPT-2: q, k, v, o, up, down and two LayerNorm biases per layer, the final one.
    EXPECT_EQ(biases, gpt ? 8 * c.num_layers + 1 : 3 * c.num_layers);
    EXPECT_EQ(scaled, gpt ? 2 * c.num_layers : 0);
  }
}

TEST(Init, TheSeedAloneDecidesAndTensorsDiffer) {
  const LlamaConfig c = small_config();
  LlamaParams a = LlamaParams::zeros(c, DType::kF32, Device::cpu());
  LlamaParams b = LlamaParams::zeros(c, DType::kF32, Device::cpu(), /*one_buffer=*/true);
  LlamaParams d = LlamaParams::zeros(c, DType::kF32, Device::cpu());
  init_llama_params(a, c, 7, 0.02f);
  init_llama_params(b, c, 7, 0.02f);
  init_llama_params(d, c, 8, 0.02f);
  auto na = a.named(), nb = b.named(), nd = d.named();
  for (size_t k = 0; k < na.size(); ++k) {
    const Tensor& x = *na[k].second;
    EXPECT_EQ(0, std::memcmp(x.data<float>(), nb[k].second->data<float>(), x.nbytes())) << na[k].first;
    if (na[k].first.find("norm.weight") == std::string::npos && na[k].first.find(".bias") == std::string::npos) {
      EXPECT_NE(0, std::memcmp(x.data<float>(), nd[k].second->data<float>(), x.nbytes())) << na[k].first;
    }
  }
  // Two projections of one shape draw different values (the tensor's index is
  // in the counter).
  const Tensor& q = a.layers[0].k_proj;
  const Tensor& v = a.layers[0].v_proj;
  ASSERT_EQ(q.shape(), v.shape());
  EXPECT_NE(0, std::memcmp(q.data<float>(), v.data<float>(), q.nbytes()));
}

// The draws are the formula's (kernels/normal_draw.h) and not this code's accident: the first values
// of the embedding (tensor 0) at seed 7, std 0.02, computed apart by the same formula in Python's
// double math (key = mix64(seed ^ mix64(0x9e3779b97f4a7c15 · (k + 1))), u = ((mix64(key + i) >> 11) + 1)
// · 2^-53, r = sqrt(-2 ln u1), a = 2π u2, values std·r·cos a, std·r·sin a rounded to f32).
TEST(Init, DrawsAreTheFormulasValues) {
  const LlamaConfig c = small_config();
  LlamaParams p = LlamaParams::zeros(c, DType::kF32, Device::cpu());
  init_llama_params(p, c, 7, 0.02f);
  const float expected[] = {0x1.e16984p-8f, -0x1.c90fc8p-7f, -0x1.cd0968p-11f,
                            0x1.eaeb2ap-7f, 0x1.07b5aep-5f,  -0x1.46baeep-7f};
  const float* e = p.named()[0].second->data<float>();
  for (int i = 0; i < 6; ++i) EXPECT_EQ(e[i], expected[i]) << "element " << i;
}

TEST(Init, Bf16IsTheRoundingOfF32) {
  const LlamaConfig c = small_config();
  LlamaParams f = LlamaParams::zeros(c, DType::kF32, Device::cpu());
  LlamaParams h = LlamaParams::zeros(c, DType::kBF16, Device::cpu());
  init_llama_params(f, c, 3, 0.02f);
  init_llama_params(h, c, 3, 0.02f);
  auto nf = f.named(), nh = h.named();
  for (size_t k = 0; k < nf.size(); ++k) {
    const Tensor rounded = nf[k].second->to_dtype(DType::kBF16);
    EXPECT_EQ(0, std::memcmp(rounded.data<bf16>(), nh[k].second->data<bf16>(), rounded.nbytes())) << nf[k].first;
  }
}

}  // namespace
}  // namespace seqpar
