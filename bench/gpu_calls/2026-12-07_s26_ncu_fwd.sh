#!/bin/bash
# For a later session (written in the twenty-sixth, not run): why the persistent sm_90 forward of call 1 (7-8% slower)
# lost, and what a block's start-up costs the default (bench/NOTES.md, "A lead for the forward"). ncu (clocks left
# alone) on one forward launch, S = 16K, H 32 / Hkv 8, causal, D = 128 and 64: the default build, the persistent
# build of 067b3f8 (.devtmp/base_pers, a `git archive` of it, built with -DSEQPAR_SM90_FWD_PERSISTENT=1) and cuDNN's
# kernel: duration, L2 hit rate, DRAM and L2 throughput, SM throughput, grid. About 240 s.
#   bash bench/gpu_calls/2026-12-07_s26_ncu_fwd.sh OUT_DIR
set -u
OUT=$1
. "$(dirname "$0")/build_gpu.sh"
build_gpu $OUT seqpar
build_other pers .devtmp/base_pers "-DSEQPAR_SM90_FWD_PERSISTENT=1" seqpar
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
SECT="--section SpeedOfLight --section MemoryWorkloadAnalysis --section LaunchStats --section Occupancy"
KEYS="Duration|L2 Hit Rate|L1/TEX Hit Rate|DRAM Throughput|L2 Cache Throughput|Memory Throughput|SM Throughput|Grid Size|Achieved Occupancy|Mem Busy"
A="--seq-lens 16384 --heads 32 --kv-heads 8 --passes fwd --warmup 0 --iters 1"
for D in 128 64; do
  for bin in $B build-pers; do
    timeout 60 ncu --clock-control none $SECT -k regex:fwd_sm90 -c 1 $bin/seqpar bench attention --backend flash $A \
      --head-dims $D > $OUT/ncu_fwd_$D.log 2>&1
    echo "== $bin fwd D=$D rc=$?"; grep -E "$KEYS" $OUT/ncu_fwd_$D.log | head -14
  done
  timeout 90 ncu --clock-control none $SECT -k "regex:(sdpa|flash|fmha|attn).*(fprop|fwd)" -c 1 $B/seqpar bench \
    attention --backend cudnn $A --head-dims $D > $OUT/ncu_cudnn_$D.log 2>&1
  echo "== cuDNN fwd D=$D rc=$? kernel: $(grep -m1 -oE '^  [a-zA-Z_0-9]+' $OUT/ncu_cudnn_$D.log)"
  grep -E "$KEYS" $OUT/ncu_cudnn_$D.log | head -14
done
echo "done $SECONDS s"
