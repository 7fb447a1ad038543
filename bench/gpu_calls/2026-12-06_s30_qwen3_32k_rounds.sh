#!/bin/bash
# For the next session, on an H200 only (issue 17 names it): Qwen3-1.7B at 32K measured 1.49x the ALST recipe in the
# thirtieth session (1360.9 against 2027.0 ms, one run each), 1% short of the issue's 1.5x. Three alternating rounds
# of seqpar and the ALST recipe, 5 steps each, to show the spread and the ratio's range (~330 s; carry [".devtmp"]).
# Run it after bench/gpu_calls/2026-12-06_s30_stmatrix.sh if that one's patch lands (the D = 128 backward is
# cuDNN's under auto today, so only a patch that beats cuDNN's backward moves this step).
#   bash bench/gpu_calls/2026-12-06_s30_qwen3_32k_rounds.sh OUT_DIR
set -u
OUT=$1
. "$(dirname "$0")/build_gpu.sh"
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader)
echo "$GPU"
case "$GPU" in *H200*) ;; *) echo "not an H200: nothing run"; exit 0 ;; esac
build_gpu $OUT seqpar
peer_env $OUT
KEEP="--activation-checkpointing --checkpoint-keep-attention --tiled-loss-tokens 8192 --checkpoint-placement auto"
END=${END:-580}
for r in 1 2 3; do
  run_bounded q3_32k_$r 40 $B/seqpar bench train --preset qwen3-1.7b --seq-lens 32768 --steps 5 $KEEP
  run_bounded q3_32k_alst_$r 80 python3 bench/peers/alst_train_step.py --preset qwen3-1.7b --seq-lens 32768 --steps 5 \
    --torch-adam
done
echo "done $SECONDS s"
