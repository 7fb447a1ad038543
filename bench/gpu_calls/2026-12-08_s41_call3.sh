#!/bin/bash
# Forty-first session, call 3 (after the stale maximum lands): issue 17's Qwen shapes beside
# the ALST recipe, same call, with the own forward's stale maximum (D = 128: 1.10-1.13x cuDNN's forward, was
# 1.03-1.08x): Qwen3-1.7B 32K, Qwen2.5-1.5B 64K, Qwen3-1.7B 64K, Qwen2.5-1.5B 32K, as far as the time allows (the
# last figures: the thirty-eighth session's on the H200, 1.479x, 1.444x, 1.370x; Qwen3 32K 1.50x on the H100).
#   bash bench/gpu_calls/2026-12-08_s41_call3.sh OUT_DIR   (carry [".devtmp"]; ~560 s; prebuilt: sm2, the landed tree's sources)
set -u
REAL_OUT=$1
OUT=/tmp/s41c3
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
