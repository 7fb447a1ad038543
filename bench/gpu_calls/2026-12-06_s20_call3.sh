#!/bin/bash
# GPU call 3 (twentieth session): issue 15's Llama-3.2-3B shape, never measured beside its peers:
# 64K and 128K, one sequence per step, seqpar checkpointing keeping attention (the plan: 83.6 GiB at
# 64K) and plain checkpointing, the ALST recipe (Liger, TiledMLP, checkpointing, torch AdamW) and
# transformers (sdpa, gradient checkpointing) in the same call.
#   bash bench/gpu_calls/2026-12-06_s20_call3.sh OUT_DIR
set -u
OUT=$1
. "$(dirname "$0")/build_gpu.sh"
build_gpu $OUT seqpar
peer_env $OUT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
M="--preset llama-3.2-3b --tiled-loss-tokens 8192"
# An 80 GB card (H100) holds the 3B shape's 53.9 GiB of weights, gradients and AdamW state plus 64K with
# plain checkpointing only (plan 73.3 GiB; keeping attention 83.6): there, 64K alone.
GIB=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
if [ "${GIB:-0}" -lt 100000 ]; then
  run_bounded ckpt64 60 $B/seqpar bench train $M --seq-lens 65536 --steps 4 --activation-checkpointing
  run_bounded alst64 120 python3 bench/peers/alst_train_step.py --preset llama-3.2-3b --seq-lens 65536 --steps 3 --torch-adam
  run_bounded hf64 60 python3 bench/peers/hf_train_step.py --preset llama-3.2-3b --seq-lens 65536 --gradient-checkpointing --steps 3
  echo "done $SECONDS s (an 80 GB card: 64K only)"
  exit 0
fi
run_bounded keep64 60 $B/seqpar bench train $M --seq-lens 65536 --steps 4 --activation-checkpointing --checkpoint-keep-attention
run_bounded alst64 110 python3 bench/peers/alst_train_step.py --preset llama-3.2-3b --seq-lens 65536 --steps 3 --torch-adam
run_bounded keep128 120 $B/seqpar bench train $M --seq-lens 131072 --steps 3 --activation-checkpointing --checkpoint-keep-attention \
  --tiled-mlp-tokens 8192
run_bounded alst128 200 python3 bench/peers/alst_train_step.py --preset llama-3.2-3b --seq-lens 131072 --steps 3 --torch-adam
run_bounded hf64 60 python3 bench/peers/hf_train_step.py --preset llama-3.2-3b --seq-lens 65536 --gradient-checkpointing --steps 3
run_bounded ckpt64 50 $B/seqpar bench train $M --seq-lens 65536 --steps 4 --activation-checkpointing
echo "done $SECONDS s"
