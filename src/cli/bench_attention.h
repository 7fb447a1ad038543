// `seqpar bench attention`: times seqpar's CUDA attention (attention/cuda, forward and
// forward + backward) on one long sequence per (S, D) and prints one JSON line per measurement;
// bench/peers/torch_sdpa.py prints the same lines for PyTorch SDPA (flash and cuDNN backends).
// --backend picks seqpar's own flash kernel ("seqpar_flash"), cuDNN's fused SDPA through the
// graph API ("seqpar_cudnn", attention/cuda/cudnn_sdpa.h), or auto ("seqpar_auto": what
// --attn-implementation sdpa runs, chosen per call and direction; the lines name the paths that ran).
//
// FLOPs (the convention of the PyTorch figures in bench/NOTES.md): forward 4 S^2 H D, halved when
// causal; backward 2.5x the forward, so forward + backward counts 3.5x the forward.
#pragma once

#include <cstdint>
#include <string>

namespace CLI {
class App;
}

namespace seqpar {

struct BenchAttentionOptions {
  std::string seq_lens = "4096,16384,65536";  // S values, comma-separated
  std::string head_dims = "64,128";           // D values, comma-separated
  int64_t heads = 32;                         // H
  int64_t kv_heads = 0;                       // Hkv (0: = H, plain multi-head)
  bool causal = true;
  std::string passes = "fwd,fwd_bwd";  // which of fwd, fwd_bwd to time
  int warmup = 2;                      // untimed runs per measurement
  int iters = 5;                       // timed runs; the median is reported
  std::string out;                     // also append the JSON lines to this file (empty: stdout only)
  int device = 0;
  std::string backend = "flash";  // flash | cudnn | auto (attention/attention_backend.h)
};

// Registers the options above on a (sub)command, e.g. `seqpar bench attention`.
void add_bench_attention_options(CLI::App& cmd, BenchAttentionOptions& opts);

// Runs the benchmark; returns the process exit code (non-zero without a CUDA build or device).
int run_bench_attention(const BenchAttentionOptions& opts);

}  // namespace seqpar
