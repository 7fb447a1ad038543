// Every kernel choice of a run, as one value: what `seqpar` reads from the environment at start-up
// (cli/kernel_env.h; docs/kernel-policy.md lists the variables) and hands to the commands, and what
// a trainer carries. The process-level parts (matmul, profile) are applied once by whoever owns
// the process (set_matmul_policy, set_profiling); the attention policy and the head groups travel
// to the objects that use them (LocalAttention, make_sp_attention). Defaults: what seqpar runs
// when nobody chose.
#pragma once

#include "attention/attention_policy.h"
#include "kernels/matmul_policy.h"
#include "parallel/sp_attention.h"

namespace seqpar {

struct KernelPolicy {
  AttentionPolicy attention;
  MatmulPolicy matmul;
  int ulysses_head_groups = kDefaultUlyssesHeadGroups;  // make_sp_attention's head_groups
  bool profile = false;                                 // core/profile.h's set_profiling
  bool operator==(const KernelPolicy&) const = default;
};

}  // namespace seqpar
