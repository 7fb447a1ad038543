#!/bin/bash
# For a next GPU call (written in the twenty-third session, not run): issue 15's Llama-3.2-3B shape at the
# memory of today's mode (plain checkpointing: 73.27 GiB at 64K on an H100, twenty-second session) beside the
# ALST recipe in the same call. On an H100 keeping attention needs 83.6 GiB at 64K; with the optimizer
# offloaded (its host step overlapped with the next forward) the plan gives 47.65 GiB, and with
# `--checkpoint-placement auto` 22g6f at 71.40 GiB. 128K: keeping attention, optimizer offload and a tiled MLP,
# 68.08 GiB. About 500 s; `PART=64` or `PART=128` runs one length.
#   bash bench/gpu_calls/2026-12-07_s23_llama3b.sh OUT_DIR
set -u
OUT=$1
. "$(dirname "$0")/build_gpu.sh"
build_gpu $OUT seqpar
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
peer_env $OUT
M="--preset llama-3.2-3b"
KEEP="--activation-checkpointing --checkpoint-keep-attention --tiled-loss-tokens 8192 --offload-optimizer cpu"
if [ "${PART:-64}" != 128 ]; then
  run_bounded b3_64_keep_off 70 $B/seqpar bench train $M --seq-lens 65536 --steps 3 $KEEP
  run_bounded b3_64_auto_off 70 $B/seqpar bench train $M --seq-lens 65536 --steps 3 $KEEP --checkpoint-placement auto
  run_bounded b3_64_alst 120 python3 bench/peers/alst_train_step.py $M --seq-lens 65536 --steps 3 --torch-adam
fi
if [ "${PART:-128}" != 64 ]; then
  run_bounded b3_128_keep_off 150 $B/seqpar bench train $M --seq-lens 131072 --steps 3 $KEEP --tiled-mlp-tokens 8192
  run_bounded b3_128_alst 200 python3 bench/peers/alst_train_step.py $M --seq-lens 131072 --steps 3 --torch-adam
fi
echo "done $SECONDS s"
