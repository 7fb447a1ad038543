#!/bin/bash
# Thirty-eighth session, call 3: issue 15's training table on the landed tree (a0cccae), each seqpar run beside both
# peers in the same call: transformers as HF Trainer runs it (hf_train_step.py: f32 weights, bf16 autocast, gradient
# checkpointing, sdpa) and the ALST recipe. Llama-3.2-1B at 64K, then Llama-3.2-3B at 64K (auto placement keeping
# attention). (The 1B at 128K ran in call 1.)
#   bash bench/gpu_calls/2026-12-07_s38_issue15_table.sh OUT_DIR   (carry [".devtmp"]; ~480 s; prebuilt: gpu)
set -u
REAL_OUT=$1
OUT=/tmp/s38c3
mkdir -p $OUT
. "$(dirname "$0")/build_gpu.sh"
trap "pack_logs $OUT $REAL_OUT" EXIT
build_variants $OUT
peer_env $OUT
END=${END:-585}
KEEP="--activation-checkpointing --checkpoint-keep-attention --tiled-loss-tokens 8192 --checkpoint-placement auto"
run_bounded l1_64k 40 $B/seqpar bench train --preset llama-3.2-1b --seq-lens 65536 --steps 4 $KEEP
run_bounded alst_l1_64k 80 python3 bench/peers/alst_train_step.py --preset llama-3.2-1b --seq-lens 65536 --steps 3 --torch-adam
run_bounded hf_l1_64k 80 python3 bench/peers/hf_train_step.py --preset llama-3.2-1b --seq-lens 65536 --steps 3 --gradient-checkpointing
run_bounded l3_64k 70 $B/seqpar bench train --preset llama-3.2-3b --seq-lens 65536 --steps 4 $KEEP
run_bounded alst_l3_64k 100 python3 bench/peers/alst_train_step.py --preset llama-3.2-3b --seq-lens 65536 --steps 3 --torch-adam
run_bounded hf_l3_64k 110 python3 bench/peers/hf_train_step.py --preset llama-3.2-3b --seq-lens 65536 --steps 3 --gradient-checkpointing
echo "done $SECONDS s"
