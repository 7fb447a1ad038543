// `seqpar bench sp-attention`: sequence-parallel attention (forward + backward) of one causal
// sequence of sp × tokens_per_rank tokens over the SP ranks of this job, as threads of one process
// (local transport) or one process per GPU over NCCL (under seqpar launch / torchrun / Slurm);
// bench/peers/torch_cp.py is the PyTorch context-parallel peer that prints the same JSON lines.
//
// Per shape, rank 0 prints one JSON line:
//   ms          median wall time of forward + backward, the slowest rank's (barrier + device sync
//               around every iteration)
//   ms_single   the same attention on the whole sequence on one device (rank 0's), when it fits
//   efficiency  ms_single / (sp × ms): 1.0 is perfect scaling
//   comm_ms     the communication alone: the all-to-alls and ring hops this SP mode makes for the
//               shape (an even head split's traffic), timed with the same method
//   hidden      (ms_single / sp + comm_ms - ms) / comm_ms, clamped to [0, 1]: the share of the
//               communication that overlapped compute, taking ms_single / sp as the compute (exact
//               for balanced work: Ulysses, or the ring with the zigzag layout)
//   a2a_GBps, p2p_GBps  bytes each rank sends per second in one all-to-all of q's size, and in one
//               ring hop of k and v (absent when the mode makes none)
#pragma once

#include <cstdint>
#include <string>

namespace CLI {
class App;
}

namespace seqpar {

struct BenchSpAttentionOptions {
  int sp = 2;
  std::string sp_mode = "ulysses";
  int ulysses_degree = 0;
  std::string layout = "zigzag";
  std::string tokens_per_rank = "8192,32768";  // comma-separated
  int64_t heads = 32;
  std::string kv_heads = "32,8";  // comma-separated Hkv values
  int64_t head_dim = 128;
  int head_groups = 0;  // Ulysses head-group pipeline (parallel/sp_attention.h); 0: the default
  int warmup = 2;
  int iters = 5;
  bool single = true;  // also time the whole sequence on one device
  std::string device = "cuda";
  std::string transport = "auto";
  std::string backend = "flash";  // flash | cudnn (CUDA)
  std::string out;                // also append the JSON lines here
};

void add_bench_sp_attention_options(CLI::App& cmd, BenchSpAttentionOptions& opts);

// Returns the process exit code.
int run_bench_sp_attention(const BenchSpAttentionOptions& opts);

}  // namespace seqpar
