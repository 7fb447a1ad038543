// The Llama-family architecture as seqpar uses it (parsed from HF config.json by io/).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace seqpar {

// RoPE frequencies. rope_type "default" or "llama3" (Llama-3.1 style frequency scaling).
struct RopeConfig {
  double theta = 10000.0;
  std::string type = "default";
  // llama3 scaling (used when type == "llama3")
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

struct LlamaConfig {
  int64_t vocab_size = 0;         // V
  int64_t hidden_size = 0;        // C
  int64_t intermediate_size = 0;  // F
  int64_t num_layers = 0;         // L
  int64_t num_heads = 0;          // H
  int64_t num_kv_heads = 0;       // Hkv
  int64_t head_dim = 0;           // D (C / H unless config.json says otherwise)
  double rms_norm_eps = 1e-6;
  int64_t max_position_embeddings = 2048;
  bool tie_word_embeddings = false;
  RopeConfig rope;

  // Throws InputError naming the field, its value and the rule (e.g. "num_attention_heads=6
  // must be a multiple of num_key_value_heads=4"). Every size is also bounded (the limits below),
  // so no product of sizes overflows int64 anywhere (parameter counts, bytes, the memory plan).
  void validate() const;
};

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

// The architecture of a known size without its files: llama-3.2-1b | llama-3.2-3b | llama-3.1-8b
// (their HF config.json values) | tiny (a functional check); InputError for another name.
LlamaConfig llama_preset(const std::string& name);

// inv_freq[i] = 1 / theta^(2i / D), i < D/2, then the rope_type's scaling. HF computes this in
// float32 torch ops; we round the exponent 2i/D to f32 as torch does and do the rest in double
// (within 3e-7 of HF; llama_config.cpp says why).
std::vector<float> rope_inv_freq(const LlamaConfig& config);

}  // namespace seqpar
