// The Hopper (sm_90a) flash-attention forward: warpgroup MMA (wgmma.mma_async) fed by the tensor
// memory accelerator (cp.async.bulk.tensor) through an mbarrier ring; same contract as launch_fwd
// (attn_launch.h: layouts, masking by seg/pos, out 0 / lse -inf for rows that see no key).
// attn_dispatch.cpp routes launch_fwd here on sm_90 devices (AttentionPolicy::fwd_kernel auto or wgmma).
#pragma once

#include <cuda_runtime.h>

#include "attention/cuda/attn_launch.h"

namespace seqpar::cuda_attn {

// Whether launch_fwd_sm90 can run this call: D 64 or 128 (not 96: its TMA boxes and swizzled
// tiles are whole 64-column halves; attn_dispatch.cpp sends D 96 to the mma.sync kernel), H a
// multiple of Hkv (H < 65536), q/k/v 16-byte aligned (the tensor copies' rule). It does not look at the device (the caller does).
// p.q_stats / p.k_stats are not used: the kernel's tiles (BM 128 or 192 queries, BN 128 keys)
// differ from the mma kernel's, so the launcher computes its own tile statistics.
bool fwd_sm90_supported(const FwdParams& p);

// Requires fwd_sm90_supported(p) and a compute capability 9.0 device (`cc`, the current device's
// device_compute_capability); throws otherwise.
void launch_fwd_sm90(const FwdParams& p, int cc, cudaStream_t stream);

}  // namespace seqpar::cuda_attn
