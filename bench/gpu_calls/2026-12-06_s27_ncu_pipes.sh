#!/bin/bash
# Twenty-seventh session: where the sm_90 forward loses to cuDNN's at the same shape (S = 16K, H 32 / Hkv 8, causal,
# D = 64 and 128; one launch each under ncu, clocks left alone): compute-pipe use (tensor, FMA, ALU, XU = MUFU),
# issue-slot use, executed instructions and the warp stall reasons.
#   bash bench/gpu_calls/2026-12-06_s27_ncu_pipes.sh OUT_DIR
set -u
OUT=$1
. "$(dirname "$0")/build_gpu.sh"
build_gpu $OUT seqpar
SECT="--section ComputeWorkloadAnalysis --section InstructionStats --section WarpStateStats --section SchedulerStats"
A="--seq-lens 16384 --heads 32 --kv-heads 8 --passes fwd --warmup 0 --iters 1"
MET="--metrics sm__inst_executed_pipe_xu.sum,sm__inst_executed_pipe_fma.sum,sm__inst_executed_pipe_alu.sum,sm__inst_executed_pipe_fp16.sum,sm__inst_executed.sum,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_xu_cycles_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__cycles_elapsed.avg"
for D in 64 128; do
  timeout 90 ncu --clock-control none $SECT $MET -k regex:fwd_sm90 -c 1 $B/seqpar bench attention --backend flash $A \
    --head-dims $D > $OUT/pipes_flash_$D.log 2>&1
  echo "== flash D=$D rc=$?"
  timeout 120 ncu --clock-control none $SECT $MET -k "regex:(sdpa|flash|fmha|attn).*(fprop|fwd)" -c 1 $B/seqpar bench \
    attention --backend cudnn $A --head-dims $D > $OUT/pipes_cudnn_$D.log 2>&1
  echo "== cudnn D=$D rc=$?"
done
for f in $OUT/pipes_*.log; do
  echo "#### $(basename $f)"
  grep -E "Duration|Executed Ipc|Issue Slots Busy|sm__|smsp__|Stall|Warp Cycles Per Issued|Executed Instructions  " $f | head -40
done
echo "done $SECONDS s"
