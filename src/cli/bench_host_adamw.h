// `seqpar bench host-adamw`: times the offloaded optimizer step's CPU work (train/optimizer.h,
// host_adamw_chunk: AdamW on f32 master weights, moments and gradients in host memory, the result
// rounded to bf16), chunk by chunk as a step streams it, at each thread count; one JSON line per
// thread count with the step time, elements/s and the host memory traffic rate (30 bytes an
// element: gradient, weight and both moments read, weight and moments written, bf16 written).
// bench/peers/cpu_adam_step.py prints the same lines for DeepSpeed's CPU Adam (the optimizer of
// DeepSpeed's offload_optimizer) and torch's fused CPU AdamW.
#pragma once

#include <cstdint>
#include <string>

namespace CLI {
class App;
}

namespace seqpar {

struct BenchHostAdamWOptions {
  int64_t params = int64_t{1} << 30;  // elements updated per step
  std::string threads = "1,4,all";    // thread counts; "all" = every core
  int steps = 5;                      // timed steps after one untimed; the median is reported
  std::string out;                    // also append the JSON lines to this file
};

void add_bench_host_adamw_options(CLI::App& cmd, BenchHostAdamWOptions& opts);
int run_bench_host_adamw(const BenchHostAdamWOptions& opts);

}  // namespace seqpar
