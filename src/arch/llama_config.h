// The Llama-family architectures as seqpar uses them (parsed from HF config.json by io/): Llama
// itself and the families that are Llama plus options, one model implementation for all:
//   qwen2   (Qwen2/Qwen2.5): biases on q/k/v (not o); sliding window on layers >= max_window_layers
//           when use_sliding_window (or as layer_types says)
//   qwen3   : RMSNorm over head_dim on every q and k head before RoPE (q_norm, k_norm), explicit
//           head_dim, attention_bias (q/k/v/o biases), the same sliding-window keys as qwen2
//   mistral : a sliding window on every layer (sliding_window; null = full causal), head_dim
//   gpt2    (GPT2LMHeadModel, Megatron-DeepSpeed's GPT): learned absolute position embeddings (wpe)
//           instead of RoPE, LayerNorm with bias instead of RMSNorm, a GELU MLP (up/down, no gate)
//           with biases, biases on q/k/v/o, tied LM head; the options below say each of these
// llama's own attention_bias (q/k/v/o biases) is accepted too.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace seqpar {

// RoPE frequencies, the rope_types of transformers' modeling_rope_utils (docs/models.md, "RoPE"):
//   default   inv_freq[i] = 1 / theta^(2i/D)
//   linear    default / factor (positions divided by factor)
//   dynamic   NTK-aware: above max_position_embeddings, theta grows with the batch's length (rope_len)
//   llama3    Llama-3.1 frequency bands (factor, low/high_freq_factor, original_max_position_embeddings)
//   yarn      YaRN ramp between interpolated and extrapolated frequencies (factor, beta_fast/slow,
//             original_max_position_embeddings, truncate), cos/sin times attention_factor
//   longrope  default / short_factor[i] or / long_factor[i] by the batch's length against
//             original_max_position_embeddings, cos/sin times attention_factor
struct RopeConfig {
  double theta = 10000.0;
  std::string type = "default";
  // linear, dynamic, llama3, yarn, longrope. yarn / longrope given without one (null): the parser
  // sets max_position_embeddings / original_max_position_embeddings, transformers' fallback.
  double factor = 1.0;
  // llama3
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  // llama3, yarn, longrope (dynamic uses max_position_embeddings, as transformers does)
  int64_t original_max_position_embeddings = 8192;
  // yarn: the ramp's bounds in rotations (transformers' `or` defaults: 0 or absent = 32 and 1),
  // the correction range rounded outwards (truncate, 5.x key, default true), and the attention
  // factor's inputs: mscale / mscale_all_dim (0 = absent; used only when both are given).
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  bool truncate = true;
  double mscale = 0.0;
  double mscale_all_dim = 0.0;
  // yarn, longrope: the explicit factor on cos and sin; absent = derived (rope_attention_factor).
  std::optional<double> attention_factor;
  // longrope: per-frequency divisors, D/2 each; long_factor when rope_len > original_max_position_embeddings.
  std::vector<double> short_factor;
  std::vector<double> long_factor;
};

// The rope types seqpar knows, "default, linear, ..." (messages).
const char* rope_type_names();

enum class ModelFamily { kLlama, kQwen2, kQwen3, kMistral, kGpt2 };
// HF model_type: "llama" | "qwen2" | "qwen3" | "mistral" | "gpt2"; the *ForCausalLM class name
// (GPT2LMHeadModel for gpt2).
const char* model_family_name(ModelFamily family);
const char* model_family_architecture(ModelFamily family);

// The decoder's building blocks, per family (Llama: RMSNorm, RoPE, SwiGLU; GPT-2: LayerNorm with
// bias, learned positions, GELU MLP with biases).
enum class NormKind { kRmsNorm, kLayerNorm };
enum class PositionKind { kRope, kLearned };  // RoPE on q/k | learned absolute embeddings added to x
enum class MlpKind { kSwiGlu, kGelu };        // down(silu(gate(x)) * up(x)) | down(gelu(up(x)))
// GELU's form (HF activation_function): gelu = erf (exact), gelu_new / gelu_pytorch_tanh = tanh.
enum class GeluForm { kErf, kTanh };
const char* norm_kind_name(NormKind kind);          // "rmsnorm" | "layernorm"
const char* position_kind_name(PositionKind kind);  // "rope" | "learned"

struct LlamaConfig {
  int64_t vocab_size = 0;         // V
  int64_t hidden_size = 0;        // C
  int64_t intermediate_size = 0;  // F
  int64_t num_layers = 0;         // L
  int64_t num_heads = 0;          // H
  int64_t num_kv_heads = 0;       // Hkv
  int64_t head_dim = 0;           // D (C / H unless config.json says otherwise)
  double rms_norm_eps = 1e-6;     // the eps of every norm, RMSNorm or LayerNorm (gpt2: layer_norm_epsilon)
  // The longest position: RoPE's nominal context; with learned positions the rows of the position
  // embedding (gpt2: n_positions), so a longer sequence is an InputError (check_positions).
  int64_t max_position_embeddings = 2048;
  bool tie_word_embeddings = false;
  RopeConfig rope;

  ModelFamily family = ModelFamily::kLlama;
  bool qkv_bias = false;  // biases on q_proj, k_proj, v_proj ([H*D], [Hkv*D], [Hkv*D])
  bool o_bias = false;    // bias on o_proj ([C])
  bool qk_norm = false;   // q_norm, k_norm: RMSNorm weights [D] over each head (Qwen3)
  NormKind norm = NormKind::kRmsNorm;
  bool norm_bias = false;  // LayerNorm biases ([C]) on every norm (layernorm only)
  PositionKind positions = PositionKind::kRope;
  MlpKind mlp = MlpKind::kSwiGlu;
  GeluForm gelu = GeluForm::kTanh;  // (kGelu)
  bool mlp_bias = false;            // biases on up ([F]) and down ([C]) (kGelu only)
  // gpt2: activation_function as read ("gelu", "gelu_new", "gelu_pytorch_tanh"), written back on export.
  std::string activation_function = "gelu_new";
  // Sliding window W (0 = none) and which layers use it ([L], all false = none; empty = none).
  // Qwen2/3 keep their config keys for export: use_sliding_window and max_window_layers.
  int64_t sliding_window = 0;
  std::vector<bool> sliding_layers;
  bool use_sliding_window = false;  // qwen2 / qwen3 key, as read
  int64_t max_window_layers = 0;    // qwen2 / qwen3 key, as read
  // The attention window of layer l (AttnArgs::window): W on a sliding layer, else 0.
  int32_t layer_window(int64_t l) const {
    return l >= 0 && l < static_cast<int64_t>(sliding_layers.size()) && sliding_layers[static_cast<size_t>(l)]
               ? static_cast<int32_t>(sliding_window)
               : 0;
  }

  // Throws InputError naming the field, its value and the rule (e.g. "num_attention_heads=6
  // must be a multiple of num_key_value_heads=4"). Every size is also bounded (the limits below),
  // so no product of sizes overflows int64 anywhere (parameter counts, bytes, the memory plan).
  void validate() const;
  // InputError naming seq_len and max_position_embeddings (n_positions) when a sequence of seq_len
  // tokens has positions beyond the learned position embedding; nothing for RoPE (which has none).
  void check_positions(int64_t seq_len, const std::string& setting = "seq_len") const;
};

// Sets the GPT-2 options (family gpt2, as transformers' GPT2LMHeadModel builds it) on a config
// whose sizes are set: LayerNorm with bias, learned positions, the GELU MLP of
// `activation_function` (gelu: erf; gelu_new, gelu_pytorch_tanh: tanh) with biases, q/k/v/o
// biases, tied embeddings, Hkv = H, head_dim = C / H. validate() checks the result.
void make_gpt2(LlamaConfig& config, const std::string& activation_function);

// Learned positions: the most rows seqpar accepts for a position embedding (wpe [P, C]).
inline constexpr int64_t kMaxLearnedPositions = int64_t{1} << 24;

// The largest sizes a config may give: far beyond every published Llama (405B: C=16384,
// F=53248, L=126, H=128, V=128256), and small enough that the parameter count (< 2^54) and its
// bytes stay within int64. A larger value is a corrupt or hostile config.
inline constexpr int64_t kMaxVocabSize = (int64_t{1} << 31) - 1;  // token ids are int32
inline constexpr int64_t kMaxHiddenSize = int64_t{1} << 17;
inline constexpr int64_t kMaxIntermediateSize = int64_t{1} << 20;
inline constexpr int64_t kMaxLayers = int64_t{1} << 12;
inline constexpr int64_t kMaxHeads = int64_t{1} << 12;
inline constexpr int64_t kMaxHeadDim = int64_t{1} << 12;
inline constexpr int64_t kMaxPositionEmbeddings = int64_t{1} << 40;

// The architecture of a known size without its files (their HF config.json values):
// llama-3.2-1b | llama-3.2-3b | llama-3.1-8b | qwen2.5-1.5b | qwen3-1.7b | qwen3-8b | mistral-7b |
// tiny (a functional check) | gpt-1.3b-32k | gpt-30b-32k (Megatron-DeepSpeed's sequence-parallel
// GPT scripts, ds_pretrain_gpt_{1.3B,30B}_seq_parallel_32k.sh) | gpt-tiny (a functional check of
// the GPT family); InputError for another name.
LlamaConfig llama_preset(const std::string& name);
// The preset names, in the order above.
const std::vector<std::string>& llama_preset_names();
// "a | b | ..." of those names (help texts).
std::string preset_choices();

// inv_freq[i] = 1 / theta^(2i / D), i < D/2, then the rope_type's scaling. HF computes this in
// float32 torch ops; we round the exponent 2i/D to f32 as torch does and do the rest in double
// (within 3e-7 of HF; llama_config.cpp says why).
// rope_len: 1 + the largest position id of the batch's real tokens over the whole (global) batch,
// what transformers' dynamic_rope_update calls seq_len (max(position_ids) + 1). Only dynamic and
// longrope depend on it; 0 (or anything <= the original length) gives the frequencies transformers
// builds at init (dynamic: default; longrope: short_factor).
std::vector<float> rope_inv_freq(const LlamaConfig& config, int64_t rope_len = 0);
// Whether rope_inv_freq depends on rope_len (dynamic, longrope).
bool rope_depends_on_length(const RopeConfig& rope);
// The factor on cos and sin (transformers' attention_scaling): yarn and longrope, explicit
// attention_factor or derived from factor (yarn: get_mscale, with mscale / mscale_all_dim;
// longrope: sqrt(1 + ln(factor) / ln(original_max_position_embeddings)), 1 when factor <= 1);
// 1 for every other type.
double rope_attention_factor(const LlamaConfig& config);
// The longest sequence the config's RoPE claims to cover: max_position_embeddings (default,
// longrope: Phi-3 style configs give the extended length there), factor * max_position_embeddings
// (linear), max(max_position_embeddings, factor * original) (llama3, yarn), unbounded (dynamic:
// INT64_MAX). A training length above it gets a warning (rope_length_warning).
int64_t rope_covered_length(const LlamaConfig& config);
// A warning text when seq_len is longer than rope_covered_length (RoPE only), else "".
std::string rope_length_warning(const LlamaConfig& config, int64_t seq_len, const std::string& setting = "seq_len");

}  // namespace seqpar
