// The process's matmul policy (matmul_policy.h). Two atomics rather than a locked struct: the
// CUDA matmul reads them on every call, and the two fields are independent.
#include "kernels/matmul_policy.h"

#include <atomic>
#include <cmath>

#include "core/error.h"

namespace seqpar {

namespace {
std::atomic<bool> g_autotune{MatmulPolicy{}.autotune};
std::atomic<double> g_budget_ms{MatmulPolicy{}.autotune_budget_ms};
}  // namespace

void set_matmul_policy(const MatmulPolicy& policy) {
  SEQPAR_INPUT_CHECK(std::isfinite(policy.autotune_budget_ms) && policy.autotune_budget_ms > 0,
                     "matmul autotune_budget_ms={} must be a positive number of milliseconds",
                     policy.autotune_budget_ms);
  g_autotune.store(policy.autotune, std::memory_order_relaxed);
  g_budget_ms.store(policy.autotune_budget_ms, std::memory_order_relaxed);
}

MatmulPolicy matmul_policy() {
  return {g_autotune.load(std::memory_order_relaxed), g_budget_ms.load(std::memory_order_relaxed)};
}

}  // namespace seqpar
