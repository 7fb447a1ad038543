#!/bin/bash
# Thirty-fifth session, call 5: issue 15's Llama-3.2-1B shape on the landed backward (dQ one step late) beside the ALST
# recipe, same call: 64K in two alternating rounds, then 128K once each (as END allows, default 560 s).
#   bash bench/gpu_calls/2026-12-07_s35_call5.sh OUT_DIR   (carry [".devtmp"]; ~420 s)
set -u
OUT=$1
. "$(dirname "$0")/build_gpu.sh"
build_gpu $OUT seqpar
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
peer_env $OUT
END=${END:-560}
KEEP="--activation-checkpointing --checkpoint-keep-attention --tiled-loss-tokens 8192 --checkpoint-placement auto"
for r in 1 2; do
  run_bounded l1_64k_$r 60 $B/seqpar bench train --preset llama-3.2-1b --seq-lens 65536 --steps 3 $KEEP
  run_bounded l1_64k_alst_$r 120 python3 bench/peers/alst_train_step.py --preset llama-3.2-1b --seq-lens 65536 --steps 3 \
    --torch-adam
done
run_bounded l1_128k 100 $B/seqpar bench train --preset llama-3.2-1b --seq-lens 131072 --steps 3 $KEEP
run_bounded l1_128k_alst 150 python3 bench/peers/alst_train_step.py --preset llama-3.2-1b --seq-lens 131072 --steps 3 \
  --torch-adam
echo "done $SECONDS s"
