// kernel_env.h: the SEQPAR_* kernel overrides read from an EnvLookup.
#include "cli/kernel_env.h"

#include <charconv>
#include <cmath>
#include <optional>
#include <string>

#include "core/error.h"
#include "core/profile.h"

namespace seqpar {

namespace {

// The variable's value, nullopt when unset or empty (empty means "not set" for every override).
std::optional<std::string> read(const EnvLookup& env, const char* name) {
  std::optional<std::string> v = env(name);
  if (v && v->empty()) return std::nullopt;
  return v;
}

bool parse_gemm_autotune(const std::string& v) {
  SEQPAR_INPUT_CHECK(v == "0" || v == "1",
                     "SEQPAR_GEMM_AUTOTUNE={} must be 0 (cuBLASLt's heuristic first pick) or 1 (time the "
                     "candidates of each GEMM shape on its first call, the default)",
                     v);
  return v == "1";
}

double parse_gemm_budget_ms(const std::string& v) {
  double ms = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), ms);
  SEQPAR_INPUT_CHECK(ec == std::errc() && end == v.data() + v.size() && std::isfinite(ms) && ms > 0,
                     "SEQPAR_GEMM_AUTOTUNE_MS={} must be a positive number (milliseconds of tuning per GEMM shape)", v);
  return ms;
}

KernelPolicy g_process_policy;

}  // namespace

KernelPolicy kernel_policy_from_env(const EnvLookup& env) {
  KernelPolicy p;
  if (auto v = read(env, "SEQPAR_FLASH_FWD_KERNEL"))
    p.attention.fwd_kernel = parse_flash_kernel(*v, "SEQPAR_FLASH_FWD_KERNEL");
  if (auto v = read(env, "SEQPAR_FLASH_BWD_KERNEL"))
    p.attention.bwd_kernel = parse_flash_kernel(*v, "SEQPAR_FLASH_BWD_KERNEL");
  if (auto v = read(env, "SEQPAR_FLASH_FWD_TILE")) p.attention.fwd_tile = parse_flash_tile(*v, "SEQPAR_FLASH_FWD_TILE");
  if (auto v = read(env, "SEQPAR_FLASH_BWD_TILE")) p.attention.bwd_tile = parse_flash_tile(*v, "SEQPAR_FLASH_BWD_TILE");
  if (auto v = read(env, "SEQPAR_CUDNN_DENSE")) p.attention.cudnn_dense = parse_cudnn_dense(*v, "SEQPAR_CUDNN_DENSE");
  if (auto v = read(env, "SEQPAR_GEMM_AUTOTUNE")) p.matmul.autotune = parse_gemm_autotune(*v);
  if (auto v = read(env, "SEQPAR_GEMM_AUTOTUNE_MS")) p.matmul.autotune_budget_ms = parse_gemm_budget_ms(*v);
  if (auto v = read(env, "SEQPAR_ULYSSES_HEAD_GROUPS"))
    p.ulysses_head_groups = parse_ulysses_head_groups(*v, "SEQPAR_ULYSSES_HEAD_GROUPS");
  // Any value but "0" turns profiling on (as it always has: SEQPAR_PROFILE=1, =yes, ...).
  if (auto v = read(env, "SEQPAR_PROFILE")) p.profile = *v != "0";
  return p;
}

const KernelPolicy& process_kernel_policy() { return g_process_policy; }

void init_process_kernel_policy(const EnvLookup& env) {
  KernelPolicy p = kernel_policy_from_env(env);
  set_matmul_policy(p.matmul);
  // Only a request turns profiling on: a test or an embedding program may have set it already.
  if (p.profile) set_profiling(true);
  g_process_policy = p;
}

}  // namespace seqpar
