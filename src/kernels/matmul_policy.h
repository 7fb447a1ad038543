// How the CUDA matmul (kernels/cuda/matmul.cpp, cuBLASLt) picks its algorithm per GEMM shape: a
// process-level choice, set once by whoever configures the process (`seqpar` at start-up from
// SEQPAR_GEMM_AUTOTUNE / SEQPAR_GEMM_AUTOTUNE_MS, cli/kernel_env.h; the benchmarks and tests that
// compare both) and held by the matmul code. CPU-only code: the CPU matmul (OpenBLAS) ignores it.
#pragma once

namespace seqpar {

struct MatmulPolicy {
  // On: a shape's first call (made while on) times a pool of cuBLASLt candidates and keeps the
  // fastest; off: every call runs cuBLASLt's heuristic first pick. A call on a stream being
  // captured into a CUDA graph is never tuned (tuning synchronises): it runs the heuristic pick.
  bool autotune = true;
  double autotune_budget_ms = 50;  // cap on one shape's tuning time, > 0
  bool operator==(const MatmulPolicy&) const = default;
};

// Sets the policy for every thread's later matmul calls (shapes already tuned keep their choice).
// An InputError naming autotune_budget_ms unless it is finite and > 0.
void set_matmul_policy(const MatmulPolicy& policy);
MatmulPolicy matmul_policy();

}  // namespace seqpar
