// `seqpar bench train`: training steps of a Llama model of a known size (Llama-3.2-1B, -3B,
// Llama-3.1-8B, or an HF directory) on synthetic tokens at given sequence lengths, through the real
// training loop (SP over the job's ranks, the memory levers, ZeRO), printing per sequence length
// one JSON line: median step time (the first step excluded), tokens/s per GPU, model TFLOP/s per
// GPU, the device allocator's peak; or the error (e.g. out of memory). bench/peers/hf_train_step.py
// prints the same lines for Hugging Face transformers on one GPU.
//
// FLOPs per step (the MFU convention, recompute not counted): 6 × (parameters outside the
// embedding table, the LM head included) × tokens + layers × 3.5 × 2 S² H D per sequence
// (causal attention forward 2 S² H D, backward 2.5×).
#pragma once

#include <cstdint>
#include <string>

namespace CLI {
class App;
}

namespace seqpar {

struct BenchTrainOptions {
  std::string preset = "llama-3.2-1b";  // llama-3.2-1b | llama-3.2-3b | llama-3.1-8b | tiny
  std::string model;                    // HF directory instead of a preset (random weights are fine)
  std::string seq_lens = "8192";        // comma-separated; each rank holds seq_len / sp tokens
  int micro_batch = 1;
  int steps = 4;  // the first is not timed
  int sp = 1;
  std::string sp_mode = "ulysses";
  int ulysses_degree = 0;
  bool activation_checkpointing = false;
  bool checkpoint_keep_attention = false;
  bool checkpoint_offload = false;  // TrainConfig::checkpoint_offload
  // Op-level profile of the timed steps (TrainConfig::profile): a table per length on stderr, the
  // top ops in the JSON line ("profile": [{op, calls, ms per step}], "profile_outside_ms").
  bool profile = false;
  std::string attn_implementation = "flash_attention_2";  // TrainConfig::attn_implementation
  int64_t mlp_tile_tokens = 0;
  int64_t loss_tile_tokens = 0;
  int zero_stage = 0;
  std::string device = "cuda";
  std::string transport = "auto";
  std::string out;  // also append the JSON lines here
};

void add_bench_train_options(CLI::App& cmd, BenchTrainOptions& opts);
int run_bench_train(const BenchTrainOptions& opts);

}  // namespace seqpar
