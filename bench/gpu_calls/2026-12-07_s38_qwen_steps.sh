#!/bin/bash
# Thirty-eighth session, call 2: issue 17's Qwen shapes on the landed tree (a0cccae) beside the ALST recipe, same call:
# Qwen3-1.7B and Qwen2.5-1.5B at 32K and 64K (auto placement), in that order, as far as the time allows. The last H200
# figures are the thirtieth session's (before the backward's dQ lag, the per-head walk at 6 heads a group and SwiGLU's
# h computed again).
#   bash bench/gpu_calls/2026-12-07_s38_qwen_steps.sh OUT_DIR   (carry [".devtmp"]; ~560 s; prebuilt: gpu)
set -u
REAL_OUT=$1
OUT=/tmp/s38c2
mkdir -p $OUT
. "$(dirname "$0")/build_gpu.sh"
trap "pack_logs $OUT $REAL_OUT" EXIT
build_variants $OUT
peer_env $OUT
END=${END:-580}
KEEP="--activation-checkpointing --checkpoint-keep-attention --tiled-loss-tokens 8192 --checkpoint-placement auto"
run_bounded q3_32k 40 $B/seqpar bench train --preset qwen3-1.7b --seq-lens 32768 --steps 4 $KEEP
run_bounded alst_q3_32k 80 python3 bench/peers/alst_train_step.py --preset qwen3-1.7b --seq-lens 32768 --steps 3 --torch-adam
run_bounded q25_64k 60 $B/seqpar bench train --preset qwen2.5-1.5b --seq-lens 65536 --steps 3 $KEEP
run_bounded alst_q25_64k 110 python3 bench/peers/alst_train_step.py --preset qwen2.5-1.5b --seq-lens 65536 --steps 3 --torch-adam
run_bounded q3_64k 60 $B/seqpar bench train --preset qwen3-1.7b --seq-lens 65536 --steps 3 $KEEP
run_bounded alst_q3_64k 120 python3 bench/peers/alst_train_step.py --preset qwen3-1.7b --seq-lens 65536 --steps 3 --torch-adam
run_bounded q25_32k 40 $B/seqpar bench train --preset qwen2.5-1.5b --seq-lens 32768 --steps 4 $KEEP
echo "done $SECONDS s"
