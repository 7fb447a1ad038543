#!/bin/bash
# Twenty-fifth session, call 3: the landed state (the backward's walk back upwards; its stage released before the
# dQ wait; boundary tiles that are one run masked from their indices) under the attention tests (SKIP_TESTS=1: not); then
# three builds of the D = 128 backward beside it and cuDNN, `bench attention --passes fwd_bwd` at 16K and 64K,
# H 32 and 16 / Hkv 8, alternating:
#   s3:   a 3-stage Q / dO ring and one shared dQ tile (-DSEQPAR_SM90_BWD_STAGES=3);
#   nodq: a diagnostic, not a kernel: the writer warp issues no dQ reductions (dq is wrong), from a copy of the tree
#         edited by sed, to see how much of the step the dQ traffic holds up (the consumers wait 15% of the time for
#         their Q / dO copies, which share the SM's tensor memory accelerator with the reductions);
#   pf:   the producer prefetching the step STAGES ahead into the L2 (-DSEQPAR_SM90_BWD_L2_PREFETCH=1).
# About 470 s.
#   bash bench/gpu_calls/2026-12-06_s25_call3.sh OUT_DIR
set -u
OUT=$1
. "$(dirname "$0")/build_gpu.sh"
build_gpu $OUT seqpar test_cuda
build_other s3 . "-DSEQPAR_SM90_BWD_STAGES=3" seqpar
rm -rf /tmp/nodq && mkdir -p /tmp/nodq && cp -r CMakeLists.txt src /tmp/nodq/
sed -i 's|tma_reduce_add_3d(&tm_dq|if (false) tma_reduce_add_3d(\&tm_dq|' /tmp/nodq/src/attention/cuda/attn_bwd_sm90.cuh
grep -c "if (false) tma_reduce_add_3d" /tmp/nodq/src/attention/cuda/attn_bwd_sm90.cuh
build_other nodq /tmp/nodq "" seqpar
build_other pf . "-DSEQPAR_SM90_BWD_L2_PREFETCH=1" seqpar
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
[ "${SKIP_TESTS:-0}" = 1 ] || run_tests 200 'CudaAttention*:CudnnAttention*:CudaSpAttention*:CudaOpHarness.*'
attn_ms cudnn $B cudnn 128 32 fwd_bwd
for bin in $B build-s3 build-nodq build-pf $B build-s3 build-nodq build-pf; do attn_ms $bin $bin flash 128 32 fwd_bwd; done
attn_ms cudnn $B cudnn 128 16 fwd_bwd
for bin in $B build-s3 build-pf; do attn_ms $bin $bin flash 128 16 fwd_bwd; done
echo "done $SECONDS s"
