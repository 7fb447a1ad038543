// seqpar bench attention|sp-attention|train|host-adamw: JSON lines of timings, comparable with the PyTorch peers in
// bench/peers/ (tools/gpu_check.sh runs both in one call and prints the ratios). The GEMM benchmark
// and its autotune diagnostics are a diagnostic tool of their own: `seqpar-diag gemm` (bench/diag/).
#include <memory>

#include "cli/bench_attention.h"
#include "cli/bench_host_adamw.h"
#include "cli/bench_sp_attention.h"
#include "cli/bench_train.h"
#include "cli/commands.h"

namespace seqpar {

void add_bench_command(CLI::App& app, int& rc) {
  CLI::App* bench = app.add_subcommand("bench", "GPU micro-benchmarks (JSON lines: shape, ms, TFLOP/s)");
  bench->require_subcommand(1);

  auto attn = std::make_shared<BenchAttentionOptions>();
  CLI::App* a = bench->add_subcommand(
      "attention", "attention forward and forward+backward, causal FLOPs counted as half of the full matrix");
  add_bench_attention_options(*a, *attn);
  a->callback([attn, &rc] { rc = run_bench_attention(*attn); });

  auto sp = std::make_shared<BenchSpAttentionOptions>();
  CLI::App* s = bench->add_subcommand(
      "sp-attention",
      "sequence-parallel attention forward+backward over the job's ranks (threads, or one process per GPU under a "
      "launcher): time, scaling efficiency against one device, communication and the share of it hidden");
  add_bench_sp_attention_options(*s, *sp);
  s->callback([sp, &rc] { rc = run_bench_sp_attention(*sp); });

  auto tr = std::make_shared<BenchTrainOptions>();
  CLI::App* t = bench->add_subcommand(
      "train",
      "training steps of a Llama-3.2-1B/3B or Llama-3.1-8B sized model on synthetic tokens: step time (the median "
      "of the steps between the first and, from three steps on, the last), tokens/s and TFLOP/s per GPU, peak "
      "memory, per sequence length (bench/peers/hf_train_step.py is the transformers peer)");
  add_bench_train_options(*t, *tr);
  t->callback([tr, &rc] { rc = run_bench_train(*tr); });

  auto ha = std::make_shared<BenchHostAdamWOptions>();
  CLI::App* h = bench->add_subcommand(
      "host-adamw",
      "the offloaded optimizer step's CPU AdamW (f32 state in host memory, bf16 out) per thread count: step time, "
      "elements/s, memory traffic (bench/peers/cpu_adam_step.py is DeepSpeed's CPU Adam)");
  add_bench_host_adamw_options(*h, *ha);
  h->callback([ha, &rc] { rc = run_bench_host_adamw(*ha); });
}

}  // namespace seqpar
