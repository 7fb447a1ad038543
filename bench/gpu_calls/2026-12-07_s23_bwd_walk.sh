#!/bin/bash
# Twenty-third session: the sm_90 backward's walk over query tiles, up from each key tile's diagonal (before)
# or down from the last tile (SEQPAR_BWD_SM90_WALK=down), whose CTAs of a wave share their Q / dO / dQ rows
# in L2 (ncu before: D = 128 DRAM throughput 51.6% against cuDNN's 4.3%). Tests under both walks, then
# fwd_bwd beside cuDNN in the same call, then ncu of the down walk at D = 128.
#   bash bench/gpu_calls/2026-12-07_s23_bwd_walk.sh OUT_DIR
set -u
OUT=$1
. "$(dirname "$0")/build_gpu.sh"
build_gpu $OUT seqpar test_cuda
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for w in up down; do
  SEQPAR_BWD_SM90_WALK=$w timeout 120 $B/test_cuda --gtest_filter='CudaAttention*:CudnnAttention*:CudaSpAttention*' > $OUT/tests_$w.log 2>&1
  echo "tests walk=$w rc=$?: $(grep -E '^\[  (PASSED|FAILED) ' $OUT/tests_$w.log | tr '\n' ' ')"; grep -E "FAILED|Failure" $OUT/tests_$w.log | head -5
done
A="--seq-lens 16384,65536 --passes fwd_bwd --warmup 2 --iters 5"
for hk in 32:8:64 32:8:128 24:8:128 16:8:128; do
  IFS=: read h kv d <<< "$hk"
  for be in cudnn up down cudnn2; do
    case $be in up|down) env SEQPAR_BWD_SM90_WALK=$be $B/seqpar bench attention --backend flash $A --heads $h --kv-heads $kv --head-dims $d ;;
      *) $B/seqpar bench attention --backend cudnn $A --heads $h --kv-heads $kv --head-dims $d ;; esac 2>&1 |
      grep -o '"S": *[0-9]*\|"ms": *[0-9.]*\|"tflops": *[0-9.]*' | tr '\n' ' ' | sed "s/^/H=$h Hkv=$kv D=$d $be: /"; echo
  done
done
KEYS="Duration|DRAM Throughput|Memory Throughput|Issue Slots Busy|No Eligible"
for w in up down; do
  SEQPAR_BWD_SM90_WALK=$w timeout 60 ncu --clock-control none --section SpeedOfLight --section SchedulerStats -k regex:bwd_sm90 -c 1 \
    $B/seqpar bench attention --backend flash --seq-lens 16384 --head-dims 128 --heads 32 --kv-heads 8 \
    --passes fwd_bwd --warmup 0 --iters 1 > $OUT/ncu_$w.log 2>&1
  echo "== ncu walk=$w D=128: $(grep -E "$KEYS" $OUT/ncu_$w.log | tr -s ' ' | tr '\n' ';')"
done
echo "done $SECONDS s"
