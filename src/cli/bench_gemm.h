// `seqpar bench gemm`: times matmul (kernels/ops.h on CUDA tensors, i.e. cuBLASLt) on the GEMMs of
// Llama's projections (forward and the two backward products) and on a square reference, and
// prints one JSON line per shape (bench/peers/torch_matmul.py prints the same lines for PyTorch).
// --preset ops instead times the memory-bound ops (kernels/ops.h) at Llama-1B sizes, in bytes per
// second against a device copy timed in the same run.
#pragma once

#include <cstdint>
#include <string>

namespace CLI {
class App;
}

namespace seqpar {

struct BenchGemmOptions {
  std::string preset = "all";  // square | llama-1b | llama-3b | all | ops
  int64_t tokens = 16384;      // T of the Llama projection GEMMs
  int64_t square = 8192;       // edge of the square GEMM
  int warmup = 5;              // untimed runs per shape
  int iters = 30;              // timed runs per shape; the median is reported
  bool autotune = false;       // time cuBLASLt's top candidates per shape (cuda_ops::set_matmul_autotune)
  std::string out;             // also write the JSON lines to this file (empty: stdout only)
  int device = 0;
};

// Registers the options above on a (sub)command, e.g. `seqpar bench gemm`.
void add_bench_gemm_options(CLI::App& cmd, BenchGemmOptions& opts);

// Runs the benchmark; returns the process exit code (non-zero without a CUDA build or device).
int run_bench_gemm(const BenchGemmOptions& opts);

}  // namespace seqpar
