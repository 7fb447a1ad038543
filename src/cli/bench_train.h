// `seqpar bench train`: training steps of a Llama model of a known size (Llama-3.2-1B, -3B,
// Llama-3.1-8B, or an HF directory) on synthetic tokens at given sequence lengths, through the real
// training loop (SP over the job's ranks, the memory levers, ZeRO), printing per sequence length
// one JSON line: median step time (the first step excluded), tokens/s per GPU, model TFLOP/s per
// GPU, the device allocator's peak; or the error (e.g. out of memory). bench/peers/hf_train_step.py
// prints the same lines for Hugging Face transformers on one GPU.
//
// FLOPs per step (the MFU convention, recompute not counted): 6 × (parameters outside the
// embedding table, the LM head included) × tokens + layers × 3.5 × 2 S² H D per sequence
// (causal attention forward 2 S² H D, backward 2.5×); a layer with a sliding window W < S counts only
// the query-key pairs inside the window, (S² − (S − W)²) / 2 instead of S² / 2.
#pragma once

#include <cstdint>
#include <string>

#include "train/config.h"

namespace CLI {
class App;
}

namespace seqpar {

struct BenchTrainOptions {
  std::string preset = "llama-3.2-1b";  // a name of llama_preset_names()
  std::string seq_lens = "8192";        // comma-separated; each rank holds seq_len / sp tokens
  std::string out;                      // also append the JSON lines here
  // Shape overrides of the preset (or --model's config.json), for a model of the same layer shape
  // that fits a benchmark: the number of layers (0: the model's), and the sliding window of every
  // layer (-1: the model's; 0: none, full causal; W: a token sees itself and the W - 1 before it).
  int layers = 0;
  int64_t sliding_window = -1;
  // The declared settings bench train takes (train/config.h, kBenchTrainCommand: --model, the
  // mesh, the memory levers, ZeRO, --attn-implementation, --device, --transport, --profile, and
  // --micro-batch, --steps, the first step not timed); the rest is the benchmark's own.
  TrainConfig train = defaults();

  static TrainConfig defaults();
};

void add_bench_train_options(CLI::App& cmd, BenchTrainOptions& opts);
int run_bench_train(const BenchTrainOptions& opts);

}  // namespace seqpar
