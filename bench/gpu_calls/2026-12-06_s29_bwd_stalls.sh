#!/bin/bash
# Where the D = 128 backward's warps wait, beside cuDNN's (twenty-ninth session, for the next; ~90 s): ncu's
# per-reason stall ratios (warps stalled per issued instruction, summed over the kernel's warps: the producer and
# dQ-writer warps included) and the tensor pipe's activity, 16K, H 32 / Hkv 8, one launch each. At 16K the
# sm_90 backward takes 5700 cycles a step where its 32 wgmma need ~2560 at the tensor cores' rate; the step's
# two warpgroups meet at the dS barrier, so both run their softmax-like part at the same time.
#   bash bench/gpu_calls/2026-12-06_s29_bwd_stalls.sh OUT_DIR
set -u
OUT=$1
. "$(dirname "$0")/build_gpu.sh"
build_gpu $OUT seqpar
A="--seq-lens 16384 --heads 32 --kv-heads 8 --passes fwd_bwd --head-dims 128 --warmup 0 --iters 1"
M="regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,gpu__time_duration.sum"
for k in "flash regex:bwd_sm90" "cudnn regex:bprop"; do
  set -- $k
  timeout 120 ncu --clock-control none --metrics "$M" -k "$2" -c 1 $B/seqpar bench attention --backend $1 $A \
    > $OUT/ncu_stalls_$1.log 2>&1
  rc=$?
  echo "#### $1 rc=$rc"
  grep -E "stalled|tensor|inst_executed|duration" $OUT/ncu_stalls_$1.log | awk '$NF+0 >= 0.05 || /tensor|inst|duration/' | head -24
  if ! grep -q stalled $OUT/ncu_stalls_$1.log; then  # the regex metrics refused: the section's details instead
    timeout 120 ncu --clock-control none --section WarpStateStats --print-details all -k "$2" -c 1 $B/seqpar bench \
      attention --backend $1 $A > $OUT/ncu_stalls_$1_section.log 2>&1
    echo "#### $1 section rc=$?"
    grep -iE "stall|cycles per" $OUT/ncu_stalls_$1_section.log | head -24
  fi
done
echo "done $SECONDS s"
