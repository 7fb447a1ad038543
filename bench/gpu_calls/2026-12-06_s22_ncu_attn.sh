#!/bin/bash
# For the attention kernel work of issue 15 (item 5; written in the twenty-second session, not run): where
# seqpar's sm_90 backward loses to cuDNN's. ncu (clocks left alone) on one backward launch of each at
# S = 16K, H 32 / Hkv 8, causal, D = 64 and 128: duration, tensor-pipe and memory throughput, issue
# slots, warp stall reasons, registers, occupancy. Then the forward kernels likewise. About 300 s.
#   bash bench/gpu_calls/2026-12-06_s22_ncu_attn.sh OUT_DIR
set -u
OUT=$1
. "$(dirname "$0")/build_gpu.sh"
build_gpu $OUT seqpar
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
SECT="--section SpeedOfLight --section WarpStateStats --section ComputeWorkloadAnalysis --section LaunchStats --section Occupancy --section SchedulerStats"
KEYS="Duration|SM Throughput|Memory Throughput|DRAM Throughput|Registers Per|Achieved Occupancy|Issued Ipc|Issue Slots Busy|Eligible Warps|No Eligible|Warp Cycles Per Issued|Stall|Tensor|Pipe|Block Size|Grid Size|Shared Memory Config"
# The names of the kernels cuDNN's fwd_bwd launches (so the pattern below can be corrected if it misses).
timeout 60 ncu --clock-control none --section LaunchStats -c 12 $B/seqpar bench attention --backend cudnn \
  --seq-lens 16384 --head-dims 64 --heads 32 --kv-heads 8 --passes fwd_bwd --warmup 0 --iters 1 2>&1 |
  grep -E "Context [0-9]+, Stream" | cut -c1-160 | sort | uniq -c | head -12
for pass in bwd fwd; do
  for D in 64 128; do
    # seqpar's kernel (the fwd_bwd pass launches both; -k picks the one), then cuDNN's generated ones.
    timeout 60 ncu --clock-control none $SECT -k regex:${pass}_sm90 -c 1 \
      $B/seqpar bench attention --backend flash --seq-lens 16384 --head-dims $D --heads 32 --kv-heads 8 \
      --passes fwd_bwd --warmup 0 --iters 1 > $OUT/ncu_$pass.log 2>&1
    echo "== seqpar $pass D=$D rc=$?"; grep -E "$KEYS" $OUT/ncu_$pass.log | head -30
    cpat=$([ $pass = bwd ] && echo "bprop|bwd|dgrad" || echo "fprop|fwd")
    timeout 90 ncu --clock-control none $SECT -k "regex:(sdpa|flash|fmha|attn).*($cpat)" -c 1 \
      $B/seqpar bench attention --backend cudnn --seq-lens 16384 --head-dims $D --heads 32 --kv-heads 8 \
      --passes fwd_bwd --warmup 0 --iters 1 > $OUT/ncu_cudnn_$pass.log 2>&1
    echo "== cuDNN $pass D=$D rc=$? kernel: $(grep -m1 -oE '^  [a-zA-Z_0-9]+' $OUT/ncu_cudnn_$pass.log)"
    grep -E "$KEYS" $OUT/ncu_cudnn_$pass.log | head -30
  done
done
echo "done $SECONDS s"
