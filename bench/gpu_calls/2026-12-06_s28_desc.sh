#!/bin/bash
# Twenty-eighth session: fewer instructions per key tile in the sm_90 attention kernels, same arithmetic:
#   wgmma descriptors built once per tile and moved by one add per k16 step (sm90_ptx.cuh's desc_add) instead of
#   the mask, shift and or per operand; the warpgroup index warp-uniform (Q's descriptors in uniform registers);
#   the visible-tile walk keeps its ballot of 32 tiles (VisibleTiles) instead of re-reading the stats every tile;
#   the forward's ring slots counted on instead of it % 3. Static count of a full D = 64 forward tile's path:
#   ~554 -> 492 instructions per thread.
# 1. tests of the new build (attention, op harness) while `base` (a git archive of 0e56120 in .devtmp/base_s28)
#    builds; 2. forward and forward+backward, D 64 / 128, H 32 and 16 over Hkv 8, 16K / 64K: cuDNN, base, new,
#    base, new.   bash bench/gpu_calls/2026-12-06_s28_desc.sh OUT_DIR   (~420 s)
set -u
OUT=$1
. "$(dirname "$0")/build_gpu.sh"
build_gpu $OUT seqpar test_cuda
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
( t=$SECONDS; timeout 240 $B/test_cuda --gtest_filter='CudaAttention*:CudnnAttention*:CudaSpAttention*:CudaOpHarness.*' \
    > $OUT/tests.log 2>&1; echo "tests rc=$? $((SECONDS - t)) s" > $OUT/tests_rc.txt ) &
TP=$!
build_other base .devtmp/base_s28 "" seqpar
wait $TP
cat $OUT/tests_rc.txt; grep -E '^\[  (PASSED|FAILED) ' $OUT/tests.log; grep -E "FAILED|Failure" $OUT/tests.log | head -8
grep -q '^\[  PASSED' $OUT/tests.log || { grep -E '^\[ RUN' $OUT/tests.log | tail -2; exit 1; }
for P in fwd fwd_bwd; do
  for D in 64 128; do
    attn_ms cudnn $B cudnn $D 32 $P
    for bin in build-base $B build-base $B; do attn_ms $bin $bin flash $D 32 $P; done
    attn_ms cudnn $B cudnn $D 16 $P
    for bin in build-base $B; do attn_ms $bin $bin flash $D 16 $P; done
  done
done
echo "done $SECONDS s"
