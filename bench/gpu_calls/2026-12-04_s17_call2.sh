#!/bin/bash
# GPU call 2 (seventeenth session): call 1's ALST peer at 128K ran past its 265 s (no figure), so here
# the peer runs first with more time (it now prints each step to stderr), then seqpar's same command
# as call 1 (Llama-3.1-8B, 128K, every layer keeping its attention's output and LSE).
#   bash bench/gpu_calls/2026-12-04_s17_call2.sh OUT_DIR
set -u
OUT=$1
. "$(dirname "$0")/build_gpu.sh"
build_gpu $OUT seqpar
peer_env $OUT
t=$SECONDS
timeout 335 python3 bench/peers/alst_train_step.py --preset llama-3.1-8b --seq-lens 131072 --zero3-offload \
  --offload-ratio 0.3 --attn sdpa --steps 2 --out $OUT/train.jsonl > $OUT/alst8b.log 2>&1
echo "ALST 8B 128K rc=$? $((SECONDS - t)) s"; grep -E "^alst " $OUT/alst8b.log
t=$SECONDS
timeout 190 $B/seqpar bench train --preset llama-3.1-8b --seq-lens 131072 --activation-checkpointing \
  --checkpoint-keep-attention --tiled-mlp-tokens 8192 --tiled-loss-tokens 8192 --offload-optimizer cpu \
  --host-memory-gib 120 --steps 3 --out $OUT/train.jsonl > $OUT/bench8b.log 2>&1
echo "seqpar 8B 128K keep-attention rc=$? $((SECONDS - t)) s"; grep -E "error|step +[0-9]/" $OUT/bench8b.log | cut -c1-200
cat $OUT/train.jsonl | cut -c1-1200
