#!/bin/bash
# For the next session (written in the twenty-seventh, not yet run): the sm_90 forward in cuDNN's shapes (ncu of
# cuDNN's kernels, bench/NOTES.md twenty-seventh session), one measurement build `var` with both switches:
#   -DSEQPAR_SM90_FWD_D64_WIDE=1: D = 64 as two consumer warpgroups taking turns over 256-key tiles (S one m64n256
#     product; a warpgroup waits for its P V before issuing S, so that S, P and O fit 240 registers), 3-slot rings;
#   -DSEQPAR_SM90_FWD_D128_STAGES=3: D = 128 with 3-slot K / V rings (225 KB of shared memory; cuDNN's has 230 KB).
# Both compile without spills; the default build's SASS is unchanged. The wide loop's synchronisation passes the
# model `python3 bench/gpu_calls/2026-12-05_s19_fa3_fwd_sync_sim.py` (its case overlap=False).
# 1. `var` under the attention tests (every D = 64 and D = 128 forward case takes it); not timed if they fail/hang;
# 2. `bench attention --passes fwd` D = 64 and 128, H 32 (two alternating rounds) and 16, Hkv 8, 16K / 64K, beside
#    cuDNN; D = 64 fwd_bwd once;
# 3. ncu (clocks left alone), 16K, H 32: pipe use (tensor, XU = MUFU, FMA, ALU), issue slots, instructions of the
#    default, var and cuDNN's forward.
# About 330 s.   bash bench/gpu_calls/2026-12-07_s27_fwd_shapes.sh OUT_DIR
set -u
OUT=$1
. "$(dirname "$0")/build_gpu.sh"
build_gpu $OUT seqpar
build_other var . "-DSEQPAR_SM90_FWD_D64_WIDE=1 -DSEQPAR_SM90_FWD_D128_STAGES=3" seqpar test_cuda
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
t=$SECONDS
timeout 120 build-var/test_cuda --gtest_filter='CudaAttention*:CudnnAttention*:CudaSpAttention*:CudaOpHarness.*' \
  > $OUT/tests_var.log 2>&1
rc=$?
echo "tests var rc=$rc $((SECONDS - t)) s: $(grep -E '^\[  (PASSED|FAILED) ' $OUT/tests_var.log | tr '\n' ' ')"
grep -E "FAILED|Failure" $OUT/tests_var.log | head -6
V=""
[ $rc = 0 ] && V=build-var
for D in 64 128; do
  attn_ms cudnn $B cudnn $D 32 fwd
  for bin in $B $V $B $V; do attn_ms $bin $bin flash $D 32 fwd; done
  attn_ms cudnn $B cudnn $D 16 fwd
  for bin in $B $V; do attn_ms $bin $bin flash $D 16 fwd; done
done
attn_ms cudnn $B cudnn 64 32 fwd_bwd
for bin in $B $V; do attn_ms $bin $bin flash 64 32 fwd_bwd; done
echo "bench done $SECONDS s"
SECT="--section SpeedOfLight --section ComputeWorkloadAnalysis --section InstructionStats --section WarpStateStats --section SchedulerStats"
KEYS="Duration|Executed Ipc Active|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Executed Instructions  |SM Throughput"
# Pipe metrics in runs of their own (a metric name this ncu does not know fails only those runs).
MET="sm__inst_executed_pipe_xu.sum,sm__inst_executed_pipe_fma.sum,sm__inst_executed_pipe_alu.sum,sm__inst_executed.sum,sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"
A="--seq-lens 16384 --heads 32 --kv-heads 8 --passes fwd --warmup 0 --iters 1"
prof() {  # NAME KERNEL_REGEX BIN BACKEND D
  timeout 60 ncu --clock-control none $SECT -k "$2" -c 1 $3/seqpar bench attention --backend $4 $A --head-dims $5 \
    > $OUT/ncu_$1.log 2>&1
  echo "#### $1 rc=$?"; grep -E "$KEYS" $OUT/ncu_$1.log | head -12
  timeout 60 ncu --clock-control none --metrics $MET -k "$2" -c 1 $3/seqpar bench attention --backend $4 $A \
    --head-dims $5 > $OUT/met_$1.log 2>&1
  echo "metrics rc=$?"; grep -E "sm__|ERROR|rror" $OUT/met_$1.log | head -8
}
CUDNN_K="regex:(sdpa|flash|fmha|attn).*(fprop|fwd)"
for D in 64 128; do
  prof default_$D regex:fwd_sm90 $B flash $D
  [ -n "$V" ] && prof var_$D regex:fwd_sm90 $V flash $D
  prof cudnn_$D "$CUDNN_K" $B cudnn $D
done
echo "done $SECONDS s"
