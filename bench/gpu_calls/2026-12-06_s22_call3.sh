#!/bin/bash
# GPU call 3 (twenty-second session): op-level profiles (`--profile`) of the shapes that miss 1.5x the
# ALST recipe: Qwen3-1.7B at 32K and Qwen2.5-1.5B at 64K with --checkpoint-placement auto, the
# Llama-3.2-1B shape at 64K keeping attention. Prints each profile's table.
#   bash bench/gpu_calls/2026-12-06_s22_call3.sh OUT_DIR
set -u
OUT=$1
. "$(dirname "$0")/build_gpu.sh"
build_gpu $OUT seqpar
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
KEEP="--activation-checkpointing --checkpoint-keep-attention --tiled-loss-tokens 8192"
run_bounded q3_32k 60 $B/seqpar bench train --preset qwen3-1.7b --seq-lens 32768 --steps 3 $KEEP --checkpoint-placement auto --profile
run_bounded q25_64k 60 $B/seqpar bench train --preset qwen2.5-1.5b --seq-lens 65536 --steps 3 $KEEP --checkpoint-placement auto --profile
run_bounded l1b_64k 60 $B/seqpar bench train --preset llama-3.2-1b --seq-lens 65536 --steps 3 $KEEP --profile
for f in q3_32k q25_64k l1b_64k; do echo "== $f"; grep -v '^{' $OUT/$f.log | tail -60; done
echo "done $SECONDS s"
