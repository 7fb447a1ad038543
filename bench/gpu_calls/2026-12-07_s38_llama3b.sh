#!/bin/bash
# Thirty-eighth session, call 4: issue 15's Llama-3.2-3B shape at 64K on the landed tree beside the ALST recipe in the
# same call (call 3's ALST run did not finish inside its 100 s bound: its setup alone took 76.7 s).
#   bash bench/gpu_calls/2026-12-07_s38_llama3b.sh OUT_DIR   (carry [".devtmp"]; ~260 s; prebuilt: gpu)
set -u
REAL_OUT=$1
OUT=/tmp/s38c4
mkdir -p $OUT
. "$(dirname "$0")/build_gpu.sh"
trap "pack_logs $OUT $REAL_OUT" EXIT
build_variants $OUT
peer_env $OUT
END=${END:-420}
KEEP="--activation-checkpointing --checkpoint-keep-attention --tiled-loss-tokens 8192 --checkpoint-placement auto"
run_bounded l3_64k 80 $B/seqpar bench train --preset llama-3.2-3b --seq-lens 65536 --steps 4 $KEEP
run_bounded alst_l3_64k 220 python3 bench/peers/alst_train_step.py --preset llama-3.2-3b --seq-lens 65536 --steps 3 --torch-adam
echo "done $SECONDS s"
