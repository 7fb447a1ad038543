// `seqpar-diag gemm`: times matmul (kernels/ops.h on CUDA tensors, i.e. cuBLASLt) on the GEMMs of
// Llama's projections (forward and the two backward products) and on a square reference, and
// prints one JSON line per shape and algorithm choice (bench/peers/torch_matmul.py prints the same
// lines for PyTorch). Autotuned lines also say which configuration won and what the tuning cost.
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
  // How matmul picks each shape's cuBLASLt configuration: heuristic (its first pick; JSON impl
  // "seqpar"), autotune (timed candidates, cuda_ops::set_matmul_autotune; impl "seqpar-autotune"),
  // or both, one after the other on the same operands (two lines per shape, and a table of the
  // two on stderr).
  std::string algo = "both";
  bool autotune = false;       // --autotune: the same as algo = "autotune"
  double tune_ms = 0;          // autotune budget per shape in ms (0: the process's matmul policy, 50 or SEQPAR_GEMM_AUTOTUNE_MS)
  std::string out;             // also append the JSON lines to this file (empty: stdout only)
  int device = 0;
  // Serve timings on request (bench/peers/gemm_interleaved.py): print the preset's shapes, then
  // for each stdin line "NAME ITERS" time that shape (autotuned on its first request; warm-up
  // included) and print {"name", "ms", "ms_min"}; "quit" or end of input stops. This lets a PyTorch
  // peer alternate with seqpar shape by shape, so clock and temperature drift hit both alike.
  bool serve = false;
  // Only these shapes of the preset (comma-separated names; empty: all).
  std::string shapes;
  // Diagnostics of the autotune (instead of the timings above), per shape: --sweep times every
  // candidate of the pool (cuda_ops::matmul_candidates, forced one by one) in --rounds interleaved
  // rounds of --iters runs, the ground truth the tuning should find (JSON bench "gemm_candidate");
  // --tune-repeats N tunes the shape N times afresh and times each choice the same way
  // (bench "gemm_tune"), which shows whether the choice is stable and how far it is from the best.
  bool sweep = false;
  int tune_repeats = 0;
  int rounds = 3;
};

// Registers the options above on a (sub)command, e.g. `seqpar-diag gemm`.
void add_bench_gemm_options(CLI::App& cmd, BenchGemmOptions& opts);

// Runs the benchmark; returns the process exit code (non-zero without a CUDA build or device).
int run_bench_gemm(const BenchGemmOptions& opts);

}  // namespace seqpar
