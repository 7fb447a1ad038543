// LlamaConfig validation and the RoPE inverse frequencies.
//
// Numerics of rope_inv_freq (why it matches Hugging Face within ~3e-7 relative):
//   HF (transformers 4.x and 5.x, `_compute_default_rope_parameters` / `_compute_llama3_parameters`)
//   computes everything in float32 torch ops:
//     exponent = arange(0, D, 2).float() / D         (float32 division, correctly rounded)
//     inv_freq = 1.0 / theta ** exponent               (float32 pow and reciprocal)
//     llama3:  wavelen = 2*pi / inv_freq, then where() / smooth interpolation, all float32.
//   The float32 rounding of the exponent is what the released checkpoints were trained with and
//   it is the largest of those errors: a relative error of 2^-24 in the exponent becomes
//   exponent * ln(theta) * 2^-24 in theta^exponent, up to ~1e-6 for theta = 1e7. So we round the
//   exponent to float32 exactly as torch does, then do the pow, the reciprocal and the llama3
//   scaling in double, and round to float32 once at the end. What is left differs from HF only
//   by HF's own float32 rounding of pow / reciprocal / scaling (1-2 ulp, measured <= 3e-7
//   relative against transformers 5.24 for theta in {1e4, 5e5, 1e6, 1e7}, D in {6, 64, 96, 128},
//   default and llama3). The llama3 scaling is continuous at both wavelength thresholds (smooth
//   factor 0 gives inv/factor, 1 gives inv), so a float32-vs-double disagreement on which side of
//   a threshold a frequency falls changes the result by rounding error only; so is yarn's clamped
//   ramp. linear, dynamic (whose raised base torch forms in f32: rounded to f32 here too), yarn and
//   longrope are measured within 5e-7 relative against transformers 5.24
//   (tests/io/test_hf_rope.cpp). The attention factors are double formulas, as in Python.
#include "arch/llama_config.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <numbers>

#include "core/error.h"

namespace seqpar {

namespace {

void check_positive(int64_t value, const char* field) {
  SEQPAR_INPUT_CHECK(value > 0, "{}={} must be positive", field, value);
}

void check_size(int64_t value, const char* field, int64_t max) {
  check_positive(value, field);
  SEQPAR_INPUT_CHECK(value <= max, "{}={} is larger than {}, the most seqpar accepts (a corrupt config?)", field, value,
                     max);
}

constexpr const char* kRopeTypes = "default, linear, dynamic, llama3, yarn, longrope";

void check_original_max(const RopeConfig& rope) {
  SEQPAR_INPUT_CHECK(rope.original_max_position_embeddings > 0,
                     "rope original_max_position_embeddings={} must be positive (rope_type={})",
                     rope.original_max_position_embeddings, rope.type);
  SEQPAR_INPUT_CHECK(rope.original_max_position_embeddings <= kMaxPositionEmbeddings,
                     "rope original_max_position_embeddings={} is larger than {}, the most seqpar accepts (a corrupt "
                     "config?)",
                     rope.original_max_position_embeddings, kMaxPositionEmbeddings);
}

void check_factor_list(const std::vector<double>& list, const char* field, int64_t head_dim) {
  SEQPAR_INPUT_CHECK(static_cast<int64_t>(list.size()) == head_dim / 2,
                     "rope {} has {} entries but must have head_dim / 2 = {} (one per frequency; rope_type=longrope)",
                     field, list.size(), head_dim / 2);
  for (size_t i = 0; i < list.size(); ++i)
    SEQPAR_INPUT_CHECK(std::isfinite(list[i]) && list[i] > 0,
                       "rope {}[{}]={} must be a positive finite number (it divides a frequency; rope_type=longrope)",
                       field, i, list[i]);
}

// The RoPE part of validate(), also the precondition of rope_inv_freq.
void validate_rope(const RopeConfig& rope, int64_t head_dim) {
  check_size(head_dim, "head_dim", kMaxHeadDim);
  SEQPAR_INPUT_CHECK(head_dim % 2 == 0, "head_dim={} must be even (RoPE rotates pairs of dimensions)", head_dim);
  SEQPAR_INPUT_CHECK(std::isfinite(rope.theta) && rope.theta > 0, "rope_theta={} must be a positive finite number",
                     rope.theta);
  const std::string& t = rope.type;
  SEQPAR_INPUT_CHECK(
      t == "default" || t == "linear" || t == "dynamic" || t == "llama3" || t == "yarn" || t == "longrope",
      "rope_type='{}' is not supported (supported: {})", t, kRopeTypes);
  if (t == "default") return;
  if (t == "llama3") {
    SEQPAR_INPUT_CHECK(std::isfinite(rope.factor) && rope.factor >= 1.0,
                       "rope factor={} must be a finite number >= 1 (rope_type=llama3)", rope.factor);
    SEQPAR_INPUT_CHECK(std::isfinite(rope.low_freq_factor) && rope.low_freq_factor > 0,
                       "rope low_freq_factor={} must be positive (rope_type=llama3)", rope.low_freq_factor);
    SEQPAR_INPUT_CHECK(std::isfinite(rope.high_freq_factor) && rope.high_freq_factor > rope.low_freq_factor,
                       "rope low_freq_factor={} must be less than high_freq_factor={} (rope_type=llama3)",
                       rope.low_freq_factor, rope.high_freq_factor);
    check_original_max(rope);
    return;
  }
  if (t == "yarn" || t == "longrope") check_original_max(rope);
  // linear, dynamic, yarn, longrope: transformers only warns below 1; a factor <= 0 is no scaling at all.
  SEQPAR_INPUT_CHECK(std::isfinite(rope.factor) && rope.factor > 0,
                     "rope factor={} must be a positive finite number (rope_type={})", rope.factor, t);
  SEQPAR_INPUT_CHECK(!rope.attention_factor || (std::isfinite(*rope.attention_factor) && *rope.attention_factor > 0),
                     "rope attention_factor={} must be a positive finite number (rope_type={})",
                     rope.attention_factor.value_or(0.0), t);
  if (t == "dynamic") {
    // base = theta * (...)^(D / (D - 2)): D = 2 would divide by zero.
    SEQPAR_INPUT_CHECK(head_dim > 2,
                       "head_dim={} must be larger than 2 for rope_type=dynamic (its exponent is D/(D-2))", head_dim);
  } else if (t == "yarn") {
    SEQPAR_INPUT_CHECK(
        std::isfinite(rope.beta_fast) && std::isfinite(rope.beta_slow) && rope.beta_fast > 0 && rope.beta_slow > 0,
        "rope beta_fast={} and beta_slow={} must be positive finite numbers (rope_type=yarn)", rope.beta_fast,
        rope.beta_slow);
    SEQPAR_INPUT_CHECK(std::isfinite(rope.mscale) && std::isfinite(rope.mscale_all_dim),
                       "rope mscale={} and mscale_all_dim={} must be finite (rope_type=yarn)", rope.mscale,
                       rope.mscale_all_dim);
  } else if (t == "longrope") {
    SEQPAR_INPUT_CHECK(rope.original_max_position_embeddings > 1,
                       "rope original_max_position_embeddings={} must be > 1 (rope_type=longrope: the attention factor "
                       "divides by its log)",
                       rope.original_max_position_embeddings);
    check_factor_list(rope.short_factor, "short_factor", head_dim);
    check_factor_list(rope.long_factor, "long_factor", head_dim);
  }
}

// transformers' get_mscale (yarn).
double yarn_mscale(double scale, double mscale) { return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }

}  // namespace

const char* model_family_name(ModelFamily family) {
  switch (family) {
    case ModelFamily::kLlama:
      return "llama";
    case ModelFamily::kQwen2:
      return "qwen2";
    case ModelFamily::kQwen3:
      return "qwen3";
    case ModelFamily::kMistral:
      return "mistral";
    case ModelFamily::kGpt2:
      return "gpt2";
  }
  return "?";
}

const char* norm_kind_name(NormKind kind) { return kind == NormKind::kRmsNorm ? "rmsnorm" : "layernorm"; }
const char* position_kind_name(PositionKind kind) { return kind == PositionKind::kRope ? "rope" : "learned"; }

const char* model_family_architecture(ModelFamily family) {
  switch (family) {
    case ModelFamily::kLlama:
      return "LlamaForCausalLM";
    case ModelFamily::kQwen2:
      return "Qwen2ForCausalLM";
    case ModelFamily::kQwen3:
      return "Qwen3ForCausalLM";
    case ModelFamily::kMistral:
      return "MistralForCausalLM";
    case ModelFamily::kGpt2:
      return "GPT2LMHeadModel";
  }
  return "?";
}

void LlamaConfig::validate() const {
  check_size(vocab_size, "vocab_size", kMaxVocabSize);
  check_size(hidden_size, "hidden_size", kMaxHiddenSize);
  check_size(intermediate_size, "intermediate_size", kMaxIntermediateSize);
  check_size(num_layers, "num_hidden_layers", kMaxLayers);
  check_size(num_heads, "num_attention_heads", kMaxHeads);
  check_size(num_kv_heads, "num_key_value_heads", kMaxHeads);
  check_size(max_position_embeddings, "max_position_embeddings", kMaxPositionEmbeddings);
  SEQPAR_INPUT_CHECK(num_heads % num_kv_heads == 0,
                     "num_attention_heads={} must be a multiple of num_key_value_heads={}", num_heads, num_kv_heads);
  SEQPAR_INPUT_CHECK(std::isfinite(rms_norm_eps) && rms_norm_eps > 0,
                     "rms_norm_eps={} must be a positive finite number", rms_norm_eps);
  if (positions == PositionKind::kRope) {
    validate_rope(rope, head_dim);
  } else {
    check_size(head_dim, "head_dim", kMaxHeadDim);
    SEQPAR_INPUT_CHECK(max_position_embeddings <= kMaxLearnedPositions,
                       "n_positions={} is larger than {}, the most rows seqpar accepts for a learned position "
                       "embedding (a corrupt config?)",
                       max_position_embeddings, kMaxLearnedPositions);
  }
  SEQPAR_INPUT_CHECK(!norm_bias || norm == NormKind::kLayerNorm,
                     "norm biases need LayerNorm (an RMSNorm has a weight only): norm={}", norm_kind_name(norm));
  SEQPAR_INPUT_CHECK(!mlp_bias || mlp == MlpKind::kGelu, "MLP biases are supported on the GELU MLP only (up/down)");
  SEQPAR_INPUT_CHECK(mlp != MlpKind::kGelu || activation_function == "gelu" || activation_function == "gelu_new" ||
                         activation_function == "gelu_pytorch_tanh",
                     "activation_function='{}' is not supported (gelu, gelu_new, gelu_pytorch_tanh)",
                     activation_function);
  SEQPAR_INPUT_CHECK(mlp != MlpKind::kGelu || (gelu == GeluForm::kErf) == (activation_function == "gelu"),
                     "activation_function='{}' and the GELU form ({}) disagree", activation_function,
                     gelu == GeluForm::kErf ? "erf" : "tanh");
  SEQPAR_INPUT_CHECK(family != ModelFamily::kGpt2 ||
                         (norm == NormKind::kLayerNorm && norm_bias && positions == PositionKind::kLearned &&
                          mlp == MlpKind::kGelu && mlp_bias && qkv_bias && o_bias && !qk_norm && tie_word_embeddings &&
                          num_kv_heads == num_heads && head_dim * num_heads == hidden_size),
                     "a gpt2 model has LayerNorm with bias, learned positions, a GELU MLP with biases, q/k/v/o "
                     "biases, no q/k norms, tied embeddings, num_key_value_heads == num_attention_heads and "
                     "head_dim * heads == hidden_size");
  SEQPAR_INPUT_CHECK(sliding_window >= 0 && sliding_window <= INT32_MAX,
                     "sliding_window={} must be null or a whole number of tokens in [1, 2^31)", sliding_window);
  SEQPAR_INPUT_CHECK(sliding_layers.empty() || static_cast<int64_t>(sliding_layers.size()) == num_layers,
                     "layer_types has {} entries but num_hidden_layers={}", sliding_layers.size(), num_layers);
}

void LlamaConfig::check_positions(int64_t seq_len, const std::string& setting) const {
  if (positions != PositionKind::kLearned) return;
  SEQPAR_INPUT_CHECK(seq_len <= max_position_embeddings,
                     "{}={} is longer than the model's n_positions={} (max_position_embeddings: the rows of its "
                     "learned position embedding, so no token may sit at a position >= {})",
                     setting, seq_len, max_position_embeddings, max_position_embeddings);
}

const char* rope_type_names() { return kRopeTypes; }

bool rope_depends_on_length(const RopeConfig& rope) { return rope.type == "dynamic" || rope.type == "longrope"; }

std::vector<float> rope_inv_freq(const LlamaConfig& config, int64_t rope_len) {
  const RopeConfig& rope = config.rope;
  const int64_t D = config.head_dim;
  validate_rope(rope, D);
  const std::string& type = rope.type;

  // dynamic (NTK-aware): above max_position_embeddings the base grows with the length,
  //   base = theta * (factor * L / M - (factor - 1))^(D / (D - 2)),  L = rope_len, M = max_position_embeddings;
  // at or below M transformers keeps (or resets to) the default frequencies. torch forms that base
  // in f32 (L is a tensor); it is rounded to f32 here too.
  double theta = rope.theta;
  const auto M = static_cast<double>(config.max_position_embeddings);
  if (type == "dynamic" && static_cast<double>(rope_len) > M) {
    const double L = static_cast<double>(rope_len);
    const double Dd = static_cast<double>(D);
    theta = static_cast<float>(theta * std::pow(rope.factor * L / M - (rope.factor - 1.0), Dd / (Dd - 2.0)));
  }

  // Llama-3.1 scaling: frequencies whose wavelength exceeds old_ctx / low_freq_factor are divided
  // by factor, those below old_ctx / high_freq_factor are kept, the band between is interpolated.
  const double old_ctx = static_cast<double>(rope.original_max_position_embeddings);
  const double low_freq_wavelen = old_ctx / rope.low_freq_factor;
  const double high_freq_wavelen = old_ctx / rope.high_freq_factor;

  // yarn: the dims [low, high] (of D) between the rotation counts beta_fast and beta_slow over
  // old_ctx positions ramp from extrapolated (the default frequency) to interpolated (/ factor).
  double yarn_low = 0, yarn_high = 0;
  if (type == "yarn") {
    const double Dd = static_cast<double>(D);
    auto correction_dim = [&](double rotations) {
      return Dd * std::log(old_ctx / (rotations * 2.0 * std::numbers::pi)) / (2.0 * std::log(rope.theta));
    };
    yarn_low = correction_dim(rope.beta_fast);
    yarn_high = correction_dim(rope.beta_slow);
    if (rope.truncate) yarn_low = std::floor(yarn_low), yarn_high = std::ceil(yarn_high);
    yarn_low = std::max(yarn_low, 0.0);
    yarn_high = std::min(yarn_high, Dd - 1.0);
    if (yarn_low == yarn_high) yarn_high += 0.001;  // transformers: "prevent singularity"
  }
  const std::vector<double>& longrope_factors =
      type == "longrope" && static_cast<double>(rope_len) > old_ctx ? rope.long_factor : rope.short_factor;

  std::vector<float> inv_freq(static_cast<size_t>(D / 2));  // (D/2)
  for (int64_t i = 0; i < D / 2; ++i) {
    // torch: arange(0, D, 2).float() / D, a float32 division (see the header comment).
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(D);
    double inv = 1.0 / std::pow(theta, static_cast<double>(exponent));
    if (type == "linear") {
      inv = inv / rope.factor;
    } else if (type == "llama3") {
      const double wavelen = 2.0 * std::numbers::pi / inv;
      if (wavelen > low_freq_wavelen) {
        inv = inv / rope.factor;
      } else if (!(wavelen < high_freq_wavelen)) {
        const double smooth =
            (old_ctx / wavelen - rope.low_freq_factor) / (rope.high_freq_factor - rope.low_freq_factor);
        inv = (1.0 - smooth) * inv / rope.factor + smooth * inv;
      }
    } else if (type == "yarn") {
      // transformers: extrapolation_factor = 1 - ramp; inv = interp * (1 - ef) + extrap * ef.
      const double ramp = std::clamp((static_cast<double>(i) - yarn_low) / (yarn_high - yarn_low), 0.0, 1.0);
      const double extrapolation = 1.0 - ramp;
      inv = inv / rope.factor * (1.0 - extrapolation) + inv * extrapolation;
    } else if (type == "longrope") {
      inv = inv / longrope_factors[static_cast<size_t>(i)];
    }
    inv_freq[static_cast<size_t>(i)] = static_cast<float>(inv);
  }
  return inv_freq;
}

double rope_attention_factor(const LlamaConfig& config) {
  const RopeConfig& rope = config.rope;
  validate_rope(rope, config.head_dim);
  if (rope.type != "yarn" && rope.type != "longrope") return 1.0;
  if (rope.attention_factor) return *rope.attention_factor;
  if (rope.type == "yarn") {
    // transformers: `if mscale and mscale_all_dim` (both given and non-zero).
    if (rope.mscale != 0 && rope.mscale_all_dim != 0)
      return yarn_mscale(rope.factor, rope.mscale) / yarn_mscale(rope.factor, rope.mscale_all_dim);
    return yarn_mscale(rope.factor, 1.0);
  }
  if (rope.factor <= 1.0) return 1.0;
  return std::sqrt(1.0 + std::log(rope.factor) / std::log(static_cast<double>(rope.original_max_position_embeddings)));
}

int64_t rope_covered_length(const LlamaConfig& config) {
  const RopeConfig& rope = config.rope;
  const int64_t M = config.max_position_embeddings;
  auto scaled = [](double factor, int64_t length) {
    const double n = factor * static_cast<double>(length);
    return n >= 9.0e18 ? INT64_MAX : static_cast<int64_t>(n);
  };
  if (rope.type == "dynamic") return INT64_MAX;
  if (rope.type == "linear") return std::max(M, scaled(rope.factor, M));
  if (rope.type == "llama3" || rope.type == "yarn")
    return std::max(M, scaled(rope.factor, rope.original_max_position_embeddings));
  return M;
}

std::string rope_length_warning(const LlamaConfig& config, int64_t seq_len, const std::string& setting) {
  if (config.positions != PositionKind::kRope) return "";
  const int64_t covered = rope_covered_length(config);
  if (seq_len <= covered) return "";
  if (config.rope.type == "default")
    return fmt::format(
        "{}={} is longer than the model's max_position_embeddings={} and its config has no rope scaling: positions "
        "beyond it were never trained (rope_scaling linear, dynamic, llama3, yarn or longrope extends a context)",
        setting, seq_len, config.max_position_embeddings);
  return fmt::format(
      "{}={} is longer than the {} tokens the model's rope scaling covers (rope_type={}, factor={}, "
      "max_position_embeddings={})",
      setting, seq_len, covered, config.rope.type, config.rope.factor, config.max_position_embeddings);
}

// The GPT family's options on a config whose sizes are set: GPT-2 as transformers' GPT2LMHeadModel
// builds it (LayerNorm with bias, learned positions, GELU MLP and q/k/v/o with biases, tied).
void make_gpt2(LlamaConfig& c, const std::string& activation_function) {
  c.family = ModelFamily::kGpt2;
  c.norm = NormKind::kLayerNorm;
  c.norm_bias = true;
  c.positions = PositionKind::kLearned;
  c.mlp = MlpKind::kGelu;
  c.gelu = activation_function == "gelu" ? GeluForm::kErf : GeluForm::kTanh;
  c.activation_function = activation_function;  // (validate() refuses another name)
  c.mlp_bias = c.qkv_bias = c.o_bias = true;
  c.tie_word_embeddings = true;
  c.num_kv_heads = c.num_heads;
  c.head_dim = c.num_heads > 0 ? c.hidden_size / c.num_heads : 0;
}

namespace {

// Megatron-DeepSpeed's examples_deepspeed/sequence_parallel/ds_pretrain_gpt_{1.3B,30B}_seq_parallel_32k.sh:
// --seq-length 32768 --max-position-embeddings 32768, vocab 50257 padded to 50304, LayerNorm eps 1e-5.
// The GELU: Megatron's activation is torch's erf GELU (--openai-gelu is off), but its bias-GELU
// fusion (on unless --no-bias-gelu-fusion, which those scripts do not pass) computes the tanh form,
// and the Megatron GPT-2 -> transformers converter writes activation_function gelu_new: so the
// presets train what the scripts train and what their converted checkpoints run, the tanh form.
LlamaConfig gpt_preset(const std::string& name) {
  LlamaConfig c;
  c.vocab_size = 50304;
  c.rms_norm_eps = 1e-5;
  c.max_position_embeddings = 32768;
  if (name == "gpt-1.3b-32k" || name == "gpt-1.3b-128k") {
    // -128k: the same model with a position table of 131072 rows (0.27B more parameters), for the
    // 64K and 128K runs the 32K script's table cannot hold.
    if (name == "gpt-1.3b-128k") c.max_position_embeddings = 131072;
    c.num_layers = 24, c.hidden_size = 2048, c.num_heads = 16, c.intermediate_size = 8192;  // head_dim 128
  } else if (name == "gpt-30b-32k") {
    c.num_layers = 64, c.hidden_size = 6144, c.num_heads = 64, c.intermediate_size = 24576;  // head_dim 96
  } else {  // gpt-tiny: a functional check
    c.vocab_size = 1024, c.num_layers = 2, c.hidden_size = 256, c.num_heads = 4, c.intermediate_size = 1024;
    c.max_position_embeddings = 4096;
  }
  make_gpt2(c, "gelu_new");
  return c;
}

}  // namespace

// The architecture of a known model size (random weights are for benchmarks and plans).
const std::vector<std::string>& llama_preset_names() {
  static const std::vector<std::string> names = {"llama-3.2-1b", "llama-3.2-3b", "llama-3.1-8b", "qwen2.5-1.5b",
                                                 "qwen3-1.7b",   "qwen3-8b",     "mistral-7b",   "tiny",
                                                 "gpt-1.3b-32k", "gpt-1.3b-128k", "gpt-30b-32k",
                                                 "gpt-tiny"};
  return names;
}

std::string preset_choices() {
  std::string list;
  for (const std::string& n : llama_preset_names()) list += (list.empty() ? "" : " | ") + n;
  return list;
}

LlamaConfig llama_preset(const std::string& name) {
  const auto& names = llama_preset_names();
  SEQPAR_INPUT_CHECK(std::find(names.begin(), names.end(), name) != names.end(),
                     "preset={} is not a known model size: {}", name, preset_choices());
  if (name.rfind("gpt-", 0) == 0) return gpt_preset(name);
  LlamaConfig c;
  c.rms_norm_eps = 1e-5;
  c.rope.theta = 500000.0;
  c.vocab_size = 128256;
  if (name == "llama-3.2-1b") {
    c.hidden_size = 2048, c.intermediate_size = 8192, c.num_layers = 16, c.num_heads = 32, c.num_kv_heads = 8;
    c.head_dim = 64, c.tie_word_embeddings = true;
  } else if (name == "llama-3.2-3b") {
    c.hidden_size = 3072, c.intermediate_size = 8192, c.num_layers = 28, c.num_heads = 24, c.num_kv_heads = 8;
    c.head_dim = 128, c.tie_word_embeddings = true;
  } else if (name == "llama-3.1-8b") {
    c.hidden_size = 4096, c.intermediate_size = 14336, c.num_layers = 32, c.num_heads = 32, c.num_kv_heads = 8;
    c.head_dim = 128, c.tie_word_embeddings = false;
  } else if (name == "qwen2.5-1.5b") {  // Qwen/Qwen2.5-1.5B config.json (use_sliding_window false)
    c.family = ModelFamily::kQwen2, c.qkv_bias = true;
    c.vocab_size = 151936, c.hidden_size = 1536, c.intermediate_size = 8960, c.num_layers = 28, c.num_heads = 12;
    c.num_kv_heads = 2, c.head_dim = 128, c.tie_word_embeddings = true, c.rms_norm_eps = 1e-6;
    c.rope.theta = 1000000.0, c.max_window_layers = 21;
  } else if (name == "qwen3-1.7b" || name == "qwen3-8b") {  // Qwen/Qwen3-1.7B, Qwen/Qwen3-8B config.json
    const bool small = name == "qwen3-1.7b";
    c.family = ModelFamily::kQwen3, c.qk_norm = true;
    c.vocab_size = 151936, c.hidden_size = small ? 2048 : 4096, c.intermediate_size = small ? 6144 : 12288;
    c.num_layers = small ? 28 : 36, c.num_heads = small ? 16 : 32, c.num_kv_heads = 8, c.head_dim = 128;
    c.tie_word_embeddings = small, c.rms_norm_eps = 1e-6, c.rope.theta = 1000000.0;
    c.max_window_layers = small ? 28 : 36;
  } else if (name == "mistral-7b") {  // mistralai/Mistral-7B-v0.1 config.json (sliding_window 4096)
    c.family = ModelFamily::kMistral;
    c.vocab_size = 32000, c.hidden_size = 4096, c.intermediate_size = 14336, c.num_layers = 32, c.num_heads = 32;
    c.num_kv_heads = 8, c.head_dim = 128, c.tie_word_embeddings = false, c.rms_norm_eps = 1e-5;
    c.rope.theta = 10000.0, c.sliding_window = 4096;
    c.sliding_layers.assign(static_cast<size_t>(c.num_layers), true);
  } else {  // tiny: a functional check
    c.vocab_size = 1024, c.hidden_size = 256, c.intermediate_size = 512, c.num_layers = 2, c.num_heads = 4;
    c.num_kv_heads = 2, c.head_dim = 64, c.tie_word_embeddings = false;
  }
  c.max_position_embeddings = 1 << 22;
  return c;
}

}  // namespace seqpar
