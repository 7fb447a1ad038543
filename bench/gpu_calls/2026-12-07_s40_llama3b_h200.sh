#!/bin/bash
# Fortieth session, call 2: issue 15's Llama-3.2-3B shape on the H200 (only measured on H100s so far, where the 3B's f32
# master weights and moments leave room for no layer kept whole), 64K and then 128K, each beside the ALST recipe in the
# same call (its setup alone takes about 77 s); then Llama-3.2-1B at 64K beside transformers as HF Trainer runs it
# (issue 15 asks >= 1.6x transformers where it fits; its last H200 figure is the first session's, 4402 ms), and the 3B
# at 128K if the time allows.
#   bash bench/gpu_calls/2026-12-07_s40_llama3b_h200.sh OUT_DIR   (carry [".devtmp"]; ~360 s, 128K ~560 s; prebuilt: gpu)
set -u
REAL_OUT=$1
OUT=/tmp/s40c2
mkdir -p $OUT
. "$(dirname "$0")/build_gpu.sh"
trap "pack_logs $OUT $REAL_OUT" EXIT
build_variants $OUT
peer_env $OUT
END=${END:-570}
KEEP="--activation-checkpointing --checkpoint-keep-attention --tiled-loss-tokens 8192 --checkpoint-placement auto"
run_bounded l3_64k 70 $B/seqpar bench train --preset llama-3.2-3b --seq-lens 65536 --steps 4 $KEEP
run_bounded alst_l3_64k 150 python3 bench/peers/alst_train_step.py --preset llama-3.2-3b --seq-lens 65536 --steps 3 --torch-adam
run_bounded l1_64k 40 $B/seqpar bench train --preset llama-3.2-1b --seq-lens 65536 --steps 4 $KEEP
run_bounded hf_l1_64k 100 python3 bench/peers/hf_train_step.py --preset llama-3.2-1b --seq-lens 65536 --steps 3 --gradient-checkpointing
run_bounded l3_128k 110 $B/seqpar bench train --preset llama-3.2-3b --seq-lens 131072 --steps 3 $KEEP
run_bounded alst_l3_128k 220 python3 bench/peers/alst_train_step.py --preset llama-3.2-3b --seq-lens 131072 --steps 3 --torch-adam
echo "done $SECONDS s"
