// The one place that reads kernel choices from the environment (docs/kernel-policy.md):
//   SEQPAR_FLASH_FWD_KERNEL, SEQPAR_FLASH_BWD_KERNEL   auto | mma | wgmma
//   SEQPAR_FLASH_FWD_TILE, SEQPAR_FLASH_BWD_TILE       BMxBNxWARPS, e.g. 128x64x4
//   SEQPAR_CUDNN_DENSE                                 1 | 0
//   SEQPAR_GEMM_AUTOTUNE                               1 | 0
//   SEQPAR_GEMM_AUTOTUNE_MS                            a positive number of milliseconds
//   SEQPAR_ULYSSES_HEAD_GROUPS                         a whole number in [1, 1024]
//   SEQPAR_PROFILE                                     on unless "0"
// An unset or empty variable leaves the default. A malformed value is an InputError naming the
// variable, the value and the rule. The code below cli/ never reads the environment for these: it
// gets the values (parallel/kernel_policy.h).
#pragma once

#include "comm/dist_env.h"
#include "parallel/kernel_policy.h"

namespace seqpar {

KernelPolicy kernel_policy_from_env(const EnvLookup& env);

// The process's policy: read by cli_main once at start-up (kernel_policy_from_env(process_env()),
// its matmul and profile parts applied), then handed to the commands. Before that: the defaults.
const KernelPolicy& process_kernel_policy();
// cli_main's start-up step: reads `env`, applies set_matmul_policy and set_profiling, keeps the
// result for process_kernel_policy(). InputError for a malformed variable.
void init_process_kernel_policy(const EnvLookup& env);

}  // namespace seqpar
