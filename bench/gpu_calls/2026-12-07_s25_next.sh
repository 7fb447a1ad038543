#!/bin/bash
# For the next GPU calls (written in the twenty-fifth session, not run). The default path has changes no GPU has run:
# the sm_90 backward's dQ tiles counted by kDqTiles (the same two tiles and barriers), the sm_90 forward walking
# work items with a Q-empty barrier (one item per block in default builds). So PART=verify first.
#   PART=verify (default, ~360 s): the attention and training tests of the default build; then the persistent forward
#     (-DSEQPAR_SM90_FWD_PERSISTENT=1: one block per SM taking (query tile, head) items in turn) under the attention
#     tests; then `bench attention` forward (D = 64 and 128) and D = 64 forward+backward, 16K / 64K, H 32 / Hkv 8:
#     cuDNN, the commit before the item walk (.devtmp/base_items, a `git archive` of 17421c7), the default and the
#     persistent build, alternating; and D = 128 forward+backward, cuDNN, base, default.
#   PART=bwd (~380 s, after verify): bench/gpu_calls/2026-12-06_s25_call3.sh with SKIP_TESTS=1 (the D = 128 backward
#     with a 3-stage ring, with L2 prefetches, and the diagnostic build without dQ reductions, beside the default and
#     cuDNN). A variant that wins runs the attention tests in its build before it lands.
#   bash bench/gpu_calls/2026-12-07_s25_next.sh OUT_DIR
set -u
OUT=$1
if [ "${PART:-verify}" = bwd ]; then SKIP_TESTS=1 exec bash "$(dirname "$0")/2026-12-06_s25_call3.sh" "$OUT"; fi
. "$(dirname "$0")/build_gpu.sh"
build_gpu $OUT seqpar test_cuda
build_other pers . "-DSEQPAR_SM90_FWD_PERSISTENT=1" seqpar test_cuda
build_other base .devtmp/base_items "" seqpar
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
run_tests 200 'CudaAttention*:CudnnAttention*:CudaSpAttention*:CudaOpHarness.*:CudaTrain.*'
timeout 120 build-pers/test_cuda --gtest_filter='CudaAttention*:CudaSpAttention*:CudaOpHarness.*' > $OUT/tests_pers.log 2>&1
echo "tests pers rc=$?: $(grep -E '^\[  (PASSED|FAILED) ' $OUT/tests_pers.log | tr '\n' ' ')"
grep -E "FAILED|Failure" $OUT/tests_pers.log | head -5
for dp in 64:fwd 128:fwd 64:fwd_bwd; do
  IFS=: read d pass <<< "$dp"
  attn_ms cudnn $B cudnn $d 32 $pass
  for bin in build-base $B build-pers build-base $B build-pers; do attn_ms $bin $bin flash $d 32 $pass; done
done
attn_ms cudnn $B cudnn 128 32 fwd_bwd
for bin in build-base $B build-base $B; do attn_ms $bin $bin flash 128 32 fwd_bwd; done
echo "done $SECONDS s"
