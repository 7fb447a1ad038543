#!/bin/bash
# For the next session (written in the twenty-sixth, not yet run): two measurement builds of the sm_90 D = 128
# backward's dQ, both compiled without spills or serialized wgmmas, the default build's SASS unchanged (the same
# 3696 / 3560 instructions at D = 128 / 64, bf16):
#   pair (-DSEQPAR_SM90_BWD_PAIR_DQ=1): the CTAs of key tiles 2c and 2c + 1 run as a cluster of two and add their dQ
#     partials in distributed shared memory, so the L2 takes half the dQ reductions (they cost 10-18%);
#   own  (-DSEQPAR_SM90_BWD_OWN_KEYS=1): each consumer warpgroup computes dQ over its own 64 keys, so the two no longer
#     meet at a barrier every step; warpgroup 1 adds its partial to warpgroup 0's in the shared tile.
# 1. each build under the attention tests (D = 128 cases with an even number of key tiles take the pair: packed 3
#    docs T=1000, ring block Tq=400 Tk=500, unseen key tiles Tk=400, the window cases T=500; every D = 128 case takes
#    own); a build whose tests fail or hang (rc 124) is not timed;
# 2. `bench attention --passes fwd_bwd --head-dims 128` at 16K / 64K, H 32 and 16 / Hkv 8: cuDNN, default, pair,
#    own, and the diagnostic `half` (the writer reducing every other step's tile only: the most that halving the
#    reductions could give; dq wrong), alternating.
# About 480 s.   bash bench/gpu_calls/2026-12-07_s26_pair_dq.sh OUT_DIR
set -u
OUT=$1
. "$(dirname "$0")/build_gpu.sh"
build_gpu $OUT seqpar
build_other pair . "-DSEQPAR_SM90_BWD_PAIR_DQ=1" seqpar test_cuda
build_other own . "-DSEQPAR_SM90_BWD_OWN_KEYS=1" seqpar test_cuda
rm -rf /tmp/half && mkdir -p /tmp/half && cp -r CMakeLists.txt src /tmp/half/
sed -i 's|for (int c = 0; c < S::kDqCols / 32; ++c)$|for (int c = 0; c < ((it \& 1) ? 0 : S::kDqCols / 32); ++c)|' /tmp/half/src/attention/cuda/attn_bwd_sm90.cuh
echo "half edit: $(grep -c '(it & 1) ? 0 : S::kDqCols / 32' /tmp/half/src/attention/cuda/attn_bwd_sm90.cuh)"
build_other half /tmp/half "" seqpar
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
TIMED=""
for v in pair own; do
  t=$SECONDS
  timeout 120 build-$v/test_cuda --gtest_filter='CudaAttention*:CudnnAttention*:CudaSpAttention*:CudaOpHarness.*' \
    > $OUT/tests_$v.log 2>&1
  rc=$?
  echo "tests $v rc=$rc $((SECONDS - t)) s: $(grep -E '^\[  (PASSED|FAILED) ' $OUT/tests_$v.log | tr '\n' ' ')"
  grep -E "FAILED|Failure" $OUT/tests_$v.log | head -6
  if [ $rc = 0 ]; then
    TIMED="$TIMED build-$v"
  else  # not timed; the first failing test (or the one that hung) once more under compute-sanitizer's synccheck
    echo "$v not timed (124 = a hang)"
    tail -2 $OUT/tests_$v.log
    f=$(grep -E '^\[  FAILED  \] [A-Za-z]' $OUT/tests_$v.log | head -1 | awk '{print $4}')
    [ -z "$f" ] && f=$(grep -E '^\[ RUN      \]' $OUT/tests_$v.log | tail -1 | awk '{print $4}')
    echo "synccheck of $f:"
    timeout 90 compute-sanitizer --tool synccheck build-$v/test_cuda --gtest_filter="$f" > $OUT/sanitizer_$v.log 2>&1
    grep -E "ERROR|Barrier|========= [A-Z]" $OUT/sanitizer_$v.log | head -8
  fi
done
attn_ms cudnn $B cudnn 128 32 fwd_bwd
for bin in $B $TIMED build-half $B $TIMED build-half; do attn_ms $bin $bin flash 128 32 fwd_bwd; done
attn_ms cudnn $B cudnn 128 16 fwd_bwd
for bin in $B $TIMED $B $TIMED; do attn_ms $bin $bin flash 128 16 fwd_bwd; done
echo "done $SECONDS s"
