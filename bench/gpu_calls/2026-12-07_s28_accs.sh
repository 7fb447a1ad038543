#!/bin/bash
# For the next session (written in the twenty-eighth without a GPU): the sm_90 forward's row maximum and row sum in
# 4 independent partials (-DSEQPAR_SM90_FWD_ACCS=4, build `acc4`) instead of one chain of 16 FMNMX and one of 32 FADD
# per row (no spills; the default build's SASS is unchanged). 1. acc4 under the attention tests while nothing else
# builds (the op harness's attention case takes ~95 s, more under a build's load); 2. forward D = 64 and 128, H 32
# (two alternating rounds) and 16, Hkv 8, 16K / 64K, beside cuDNN and the default.
# 3. ncu launch statistics and warp states of the D = 128 backward beside cuDNN's.
#   bash bench/gpu_calls/2026-12-07_s28_accs.sh OUT_DIR   (~450 s)
set -u
OUT=$1
. "$(dirname "$0")/build_gpu.sh"
build_gpu $OUT seqpar
build_other acc4 . "-DSEQPAR_SM90_FWD_ACCS=4" seqpar test_cuda
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
t=$SECONDS
timeout 200 build-acc4/test_cuda --gtest_filter='CudaAttention*:CudnnAttention*:CudaSpAttention*:CudaOpHarness.EveryAttentionCaseOnEveryCudaPath' \
  > $OUT/tests_acc4.log 2>&1
echo "tests acc4 rc=$? $((SECONDS - t)) s: $(grep -E '^\[  (PASSED|FAILED) ' $OUT/tests_acc4.log | tr '\n' ' ')"
grep -E "FAILED|Failure" $OUT/tests_acc4.log | head -6
V=""
grep -q '^\[  PASSED' $OUT/tests_acc4.log && V=build-acc4
for D in 64 128; do
  attn_ms cudnn $B cudnn $D 32 fwd
  for bin in $B $V $B $V; do attn_ms $bin $bin flash $D 32 fwd; done
  attn_ms cudnn $B cudnn $D 16 fwd
  for bin in $B $V; do attn_ms $bin $bin flash $D 16 fwd; done
done
# 3. the backward's shape beside cuDNN's (16K, H 32, D 128): launch statistics (block size, registers, shared memory,
#    grid) and the warp-state section of both backward kernels.
A="--seq-lens 16384 --heads 32 --kv-heads 8 --passes fwd_bwd --head-dims 128 --warmup 0 --iters 1"
for k in "flash regex:bwd_sm90" "cudnn regex:bprop"; do
  set -- $k
  timeout 90 ncu --clock-control none --section LaunchStats --section Occupancy --section WarpStateStats -k "$2" -c 1 \
    $B/seqpar bench attention --backend $1 $A > $OUT/ncu_bwd_$1.log 2>&1
  echo "#### bwd $1 rc=$?"
  grep -E "Block Size|Grid Size|Registers Per|Shared Memory Config|Dynamic Shared|Static Shared|Threads  |Waves|Stall|Warp Cycles" \
    $OUT/ncu_bwd_$1.log | head -16
done
echo "done $SECONDS s"
