#!/bin/bash
# Thirty-fifth session, call 3: where the landed backward (dQ one step late, 57ee73d) now waits. ncu's warp-state
# sampling per SASS instruction (2026-12-07_s23_ncu_source.sh's table: the 30 instructions with the most samples and
# their top stall reasons) for the sm_90 backward at D = 128 (H 16 / Hkv 8: Qwen3's layout) and D = 64 (H 32 / Hkv 8:
# Llama-3.2-1B's), 16K, causal; then the tensor pipe's activity and the stall totals of both beside cuDNN's backward.
#   bash bench/gpu_calls/2026-12-07_s35_ncu.sh OUT_DIR   (carry [".devtmp"]; ~150 s)
set -u
OUT=$1
. "$(dirname "$0")/build_gpu.sh"
build_gpu $OUT seqpar
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
m="sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,gpu__time_duration.sum"
m+=",smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio"
m+=",smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio"
m+=",smsp__average_warps_issue_stalled_wait_per_issue_active.ratio"
m+=",smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio"
m+=",smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio"
m+=",smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio"
m+=",smsp__average_warps_issue_stalled_sleeping_per_issue_active.ratio"
m+=",smsp__average_warps_issue_stalled_branch_resolving_per_issue_active.ratio"
m+=",smsp__issue_active.avg.pct_of_peak_sustained_active,lts__t_sector_hit_rate.pct"
for x in "128 16 flash bwd_sm90" "128 16 cudnn sdpa|bprop|dgrad|cudnn" "64 32 flash bwd_sm90" "64 32 cudnn sdpa|bprop|dgrad|cudnn"; do
  set -- $x
  timeout 60 ncu --clock-control none --metrics "$m" -k regex:"$4" $B/seqpar bench attention --backend $3 \
    --seq-lens 16384 --heads $2 --kv-heads 8 --passes fwd_bwd --head-dims $1 --warmup 0 --iters 1 > $OUT/m_$1_$3.log 2>&1
  echo "#### D=$1 H=$2 $3 rc=$?"
  grep -E "^  [a-zA-Z_]|stalled|tensor|duration|issue_active|hit_rate" $OUT/m_$1_$3.log | sed 's/  */ /g' | head -40
done
for x in "128 16" "64 32"; do
  set -- $x
  timeout 120 ncu --clock-control none --section WarpStateStats --section SourceCounters -k regex:bwd_sm90 -c 1 \
    -f -o $OUT/bwd_$1 $B/seqpar bench attention --backend flash --seq-lens 16384 --head-dims $1 --heads $2 \
    --kv-heads 8 --passes fwd_bwd --warmup 0 --iters 1 > /dev/null 2>&1
  ncu --import $OUT/bwd_$1.ncu-rep --page source --csv --print-source sass > $OUT/bwd_$1.csv 2>&1
  rm -f $OUT/bwd_$1.ncu-rep
  echo "== bwd D=$1 H=$2"
  python3 "$(dirname "$0")/ncu_source_table.py" $OUT/bwd_$1.csv
done
echo "done $SECONDS s"
