// The Hopper (sm_90a) flash-attention backward MAIN kernel: warpgroup MMA (wgmma.mma_async) fed
// by the tensor memory accelerator through an mbarrier ring. It replaces only detail::run_bwd_main
// of launch_bwd (attn_launch.h): the pre-pass (launch_bwd_prep: delta, lse2, dq_acc = 0) and the
// dq finish (launch_dq_finish) are the same. Same contract as the mma.sync main kernel: dk/dv
// (+)= their gradients (write_grads: stored, 0 for keys no query sees), dq_acc += dS K (f32
// atomics). attn_dispatch.cpp routes launch_bwd here on sm_90 devices
// (AttentionPolicy::bwd_kernel auto or wgmma).
#pragma once

#include <cuda_runtime.h>

#include "attention/cuda/attn_launch.h"

namespace seqpar::cuda_attn {

// Query rows per step of the sm_90 backward: 128 at D = 64, 64 at D = 128. Its workspace rows
// lse2 / delta are read with Tq_pad = ceil(Tq / bm) * bm: the pre-pass must run with that Tq_pad
// (rows are (h, Tq_pad)); a workspace of H * ceil(Tq / 128) * 128 floats holds them at either D.
constexpr int bwd_sm90_bm(int D) { return D == 64 ? 128 : 64; }
constexpr int kBwdSm90MaxBm = 128;

// Whether launch_bwd_main_sm90 can run this call: D 64 or 128 (not 96, which the mma.sync kernel
// takes: attn_dispatch.cpp), H a multiple of Hkv (H < 65536),
// q, k, v, dout, dq_acc, lse2 and delta 16-byte aligned. It does not look at the device (the caller
// does). p.q_stats / p.k_stats are not used: the launcher computes its own tile statistics for its
// tiles (bwd_sm90_bm(D) queries, 128 keys).
bool bwd_sm90_supported(const BwdParams& p);

// The main kernel only (after launch_bwd_prep with Tq_pad as above, before launch_dq_finish).
// Requires bwd_sm90_supported(p) and a compute capability 9.0 device (`cc`, the current device's
// device_compute_capability); throws otherwise.
void launch_bwd_main_sm90(const BwdParams& p, int cc, cudaStream_t stream);

}  // namespace seqpar::cuda_attn
