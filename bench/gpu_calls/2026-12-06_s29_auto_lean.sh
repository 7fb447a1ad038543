#!/bin/bash
# Twenty-ninth session, the short form of 2026-12-06_s29_auto_mix.sh for the little device time left (~270 s; carry
# [".devtmp"]): CudnnAttention.* (with AutoPairsBackendsPerDirection) and CudaAttention*; `seqpar bench attention
# --backend cudnn|auto` at 16K / 64K, H 32 / Hkv 8, D = 64 and 128; Llama-3.2-1B at 64K keeping attention, the
# commit before the per-direction rule (e14e165, from .devtmp/base) then this tree.
#   bash bench/gpu_calls/2026-12-06_s29_auto_lean.sh OUT_DIR
set -u
OUT=$1
. "$(dirname "$0")/build_gpu.sh"
build_other base .devtmp/base "" seqpar &
build_gpu $OUT seqpar test_cuda
wait
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
run_tests 120 'CudnnAttention.*:CudaAttention*'
for be in cudnn auto; do
  $B/seqpar bench attention --backend $be --seq-lens 16384,65536 --heads 32 --kv-heads 8 --head-dims 64,128 \
    --passes fwd,fwd_bwd --out $OUT/attn_$be.jsonl > /dev/null 2>&1
  echo "$be rc=$?: $(grep -o '"S": *[0-9]*\|"D": *[0-9]*\|"pass": *"[a-z_]*"\|"ms": *[0-9.]*\|"fwd_path": *"[^"]*"\|"bwd_path": *"[^"]*"' $OUT/attn_$be.jsonl | tr '\n' ' ')"
done
KEEP="--activation-checkpointing --checkpoint-keep-attention --tiled-loss-tokens 8192"
for bin in build-base $B; do
  run_bounded l64_${bin#build-} 50 $bin/seqpar bench train --preset llama-3.2-1b --seq-lens 65536 --steps 3 $KEEP
done
echo "done $SECONDS s"
