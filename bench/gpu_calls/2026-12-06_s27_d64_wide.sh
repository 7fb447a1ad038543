#!/bin/bash
# Twenty-seventh session: the D = 64 sm_90 forward in cuDNN's shape (-DSEQPAR_SM90_FWD_D64_WIDE=1: two consumer
# warpgroups taking turns, 256-key tiles with S as one m64n256 product, 3-slot rings; no spills) beside the default
# (three warpgroups, 128-key tiles) and cuDNN; then ncu's pipe use of the default forward and cuDNN's at D = 64 / 128.
# 1. the wide build under the attention tests (every D = 64 forward case takes it); not timed if they fail or hang;
# 2. `bench attention` D = 64, fwd and fwd_bwd, H 32 / 16 over Hkv 8, 16K / 64K, alternating;
# 3. ncu (clocks left alone), S = 16K, H 32: pipe use (tensor, XU = MUFU, FMA, ALU), issue slots, instructions.
# About 300 s.   bash bench/gpu_calls/2026-12-06_s27_d64_wide.sh OUT_DIR
set -u
OUT=$1
. "$(dirname "$0")/build_gpu.sh"
build_gpu $OUT seqpar
build_other wide . "-DSEQPAR_SM90_FWD_D64_WIDE=1" seqpar test_cuda
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
t=$SECONDS
timeout 120 build-wide/test_cuda --gtest_filter='CudaAttention*:CudnnAttention*:CudaSpAttention*:CudaOpHarness.*' \
  > $OUT/tests_wide.log 2>&1
rc=$?
echo "tests wide rc=$rc $((SECONDS - t)) s: $(grep -E '^\[  (PASSED|FAILED) ' $OUT/tests_wide.log | tr '\n' ' ')"
grep -E "FAILED|Failure" $OUT/tests_wide.log | head -6
W=""
[ $rc = 0 ] && W=build-wide
attn_ms cudnn $B cudnn 64 32 fwd
for bin in $B $W $B $W; do attn_ms $bin $bin flash 64 32 fwd; done
attn_ms cudnn $B cudnn 64 16 fwd
for bin in $B $W $B $W; do attn_ms $bin $bin flash 64 16 fwd; done
attn_ms cudnn $B cudnn 64 32 fwd_bwd
for bin in $B $W; do attn_ms $bin $bin flash 64 32 fwd_bwd; done
echo "bench done $SECONDS s"
SECT="--section ComputeWorkloadAnalysis --section InstructionStats --section WarpStateStats --section SchedulerStats"
MET="--metrics sm__inst_executed_pipe_xu.sum,sm__inst_executed_pipe_fma.sum,sm__inst_executed_pipe_alu.sum,sm__inst_executed.sum,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_xu_cycles_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active"
A="--seq-lens 16384 --heads 32 --kv-heads 8 --passes fwd --warmup 0 --iters 1"
for D in 64 128; do
  for bin in $B $W; do
    [ $D = 128 ] && [ $bin = build-wide ] && continue
    timeout 60 ncu --clock-control none $SECT $MET -k regex:fwd_sm90 -c 1 $bin/seqpar bench attention --backend flash \
      $A --head-dims $D > $OUT/pipes_${bin}_$D.log 2>&1
    echo "ncu $bin D=$D rc=$?"
  done
  timeout 90 ncu --clock-control none $SECT $MET -k "regex:(sdpa|flash|fmha|attn).*(fprop|fwd)" -c 1 $B/seqpar bench \
    attention --backend cudnn $A --head-dims $D > $OUT/pipes_cudnn_$D.log 2>&1
  echo "ncu cudnn D=$D rc=$?"
done
for f in $OUT/pipes_*.log; do
  echo "#### $(basename $f)"
  grep -E "Duration|Executed Ipc Active|Issue Slots Busy|sm__|smsp__|Warp Cycles Per Issued|Executed Instructions  " $f | head -14
done
echo "done $SECONDS s"
