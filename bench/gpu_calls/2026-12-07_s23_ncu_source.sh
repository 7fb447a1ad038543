#!/bin/bash
# Twenty-third session: where the warps of seqpar's sm_90 attention kernels wait, per SASS instruction (ncu's
# warp-state sampling with the source page), for the backward at D = 128 and 64 and the forward at D = 64
# and 128 (S = 16K, H 32 / Hkv 8, causal): the 30 instructions with the most samples, with their stall reasons.
#   bash bench/gpu_calls/2026-12-07_s23_ncu_source.sh OUT_DIR (NCU_KERNELS="bwd:128 fwd:64": only those;
#   NCU_BIN=build-x: that build's binary)
set -u
OUT=$1
. "$(dirname "$0")/build_gpu.sh"
build_gpu $OUT seqpar
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for kd in ${NCU_KERNELS:-bwd:128 bwd:64 fwd:64 fwd:128}; do
  IFS=: read k d <<< "$kd"
  timeout 120 ncu --clock-control none --section WarpStateStats --section SourceCounters -k regex:${k}_sm90 -c 1 \
    -f -o $OUT/${k}_$d ${NCU_BIN:-$B}/seqpar bench attention --backend flash --seq-lens 16384 --head-dims $d --heads 32 \
    --kv-heads 8 --passes fwd_bwd --warmup 0 --iters 1 > /dev/null 2>&1
  ncu --import $OUT/${k}_$d.ncu-rep --page source --csv --print-source sass > $OUT/${k}_$d.csv 2>&1
  rm -f $OUT/${k}_$d.ncu-rep
  echo "== $k D=$d"
  python3 "$(dirname "$0")/ncu_source_table.py" $OUT/${k}_$d.csv
done
echo "done $SECONDS s"
