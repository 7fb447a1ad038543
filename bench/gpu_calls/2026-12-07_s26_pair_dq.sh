#!/bin/bash
# For the next session (written in the twenty-sixth, not yet run): the sm_90 D = 128 backward with its dQ added in
# pairs (-DSEQPAR_SM90_BWD_PAIR_DQ=1: the CTAs of key tiles 2c and 2c + 1 run as a cluster of two and add their dQ
# partials in distributed shared memory, so the L2 takes half the dQ reductions; BwdShape's PAIR in
# attn_bwd_sm90.cuh). The default build's SASS is unchanged (the same 3696 instructions at D = 128, bf16).
#   1. the pair build under the attention tests (D = 128 cases with an even number of key tiles take the pair:
#      packed 3 docs T=1000, ring block Tq=400 Tk=500, unseen key tiles Tk=400, the window cases T=500; the SP tests);
#   2. `bench attention --passes fwd_bwd --head-dims 128` at 16K / 64K, H 32 and 16 / Hkv 8: cuDNN, default, pair,
#      and the diagnostic `half` (the writer reducing every other step's tile only: the most halving could give),
#      alternating.
# About 330 s.   bash bench/gpu_calls/2026-12-07_s26_pair_dq.sh OUT_DIR
set -u
OUT=$1
. "$(dirname "$0")/build_gpu.sh"
build_gpu $OUT seqpar
build_other pair . "-DSEQPAR_SM90_BWD_PAIR_DQ=1" seqpar test_cuda
rm -rf /tmp/half && mkdir -p /tmp/half && cp -r CMakeLists.txt src /tmp/half/
sed -i 's|for (int c = 0; c < S::kDqCols / 32; ++c)$|for (int c = 0; c < ((it \& 1) ? 0 : S::kDqCols / 32); ++c)|' /tmp/half/src/attention/cuda/attn_bwd_sm90.cuh
echo "half edit: $(grep -c '(it & 1) ? 0 : S::kDqCols / 32' /tmp/half/src/attention/cuda/attn_bwd_sm90.cuh)"
build_other half /tmp/half "" seqpar
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
t=$SECONDS
timeout 120 build-pair/test_cuda --gtest_filter='CudaAttention*:CudnnAttention*:CudaSpAttention*:CudaOpHarness.*' > $OUT/tests_pair.log 2>&1
rc=$?
echo "tests pair rc=$rc $((SECONDS - t)) s: $(grep -E '^\[  (PASSED|FAILED) ' $OUT/tests_pair.log | tr '\n' ' ')"
grep -E "FAILED|Failure" $OUT/tests_pair.log | head -8
P=build-pair
[ $rc = 0 ] || { P=""; echo "pair not timed (its tests did not pass; 124 = a hang)"; tail -3 $OUT/tests_pair.log; }
attn_ms cudnn $B cudnn 128 32 fwd_bwd
for bin in $B $P build-half $B $P build-half; do attn_ms $bin $bin flash 128 32 fwd_bwd; done
attn_ms cudnn $B cudnn 128 16 fwd_bwd
for bin in $B $P $B $P; do attn_ms $bin $bin flash 128 16 fwd_bwd; done
echo "done $SECONDS s"
