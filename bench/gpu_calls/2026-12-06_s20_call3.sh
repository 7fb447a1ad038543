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
fields() { grep -o '"impl":"[a-z]*"\|"seq_len":[0-9]*\|"step_ms":[0-9.]*\|"tokens_per_s_per_gpu":[0-9.]*\|"peak_mem_gib":[0-9.]*\|"plan_peak_gib":[0-9.]*\|"loss":[0-9.]*\|"error":"[^"]*"' $1 | tr '\n' ' '; }
run() {  # NAME LIMIT COMMAND...
  local name=$1 lim=$2; shift 2
  local t=$SECONDS
  [ $((SECONDS + lim)) -gt 590 ] && { echo "$name: skipped (time)"; return; }
  timeout $lim "$@" --out $OUT/$name.jsonl > $OUT/$name.log 2>&1
  echo "$name rc=$? $((SECONDS - t)) s:"; while read -r l; do echo "$l" > /tmp/l.json; echo "  $(fields /tmp/l.json)"; done < $OUT/$name.jsonl
}
M="--preset llama-3.2-3b --tiled-loss-tokens 8192"
# An 80 GB card (H100) holds the 3B shape's 53.9 GiB of weights, gradients and AdamW state plus 64K with
# plain checkpointing only (plan 73.3 GiB; keeping attention 83.6): there, 64K alone.
GIB=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
if [ "${GIB:-0}" -lt 100000 ]; then
  run ckpt64 60 $B/seqpar bench train $M --seq-lens 65536 --steps 4 --activation-checkpointing
  run alst64 120 python3 bench/peers/alst_train_step.py --preset llama-3.2-3b --seq-lens 65536 --steps 3 --torch-adam
  run hf64 60 python3 bench/peers/hf_train_step.py --preset llama-3.2-3b --seq-lens 65536 --gradient-checkpointing --steps 3
  echo "done $SECONDS s (an 80 GB card: 64K only)"
  exit 0
fi
run keep64 60 $B/seqpar bench train $M --seq-lens 65536 --steps 4 --activation-checkpointing --checkpoint-keep-attention
run alst64 110 python3 bench/peers/alst_train_step.py --preset llama-3.2-3b --seq-lens 65536 --steps 3 --torch-adam
run keep128 120 $B/seqpar bench train $M --seq-lens 131072 --steps 3 --activation-checkpointing --checkpoint-keep-attention \
  --tiled-mlp-tokens 8192
run alst128 200 python3 bench/peers/alst_train_step.py --preset llama-3.2-3b --seq-lens 131072 --steps 3 --torch-adam
run hf64 60 python3 bench/peers/hf_train_step.py --preset llama-3.2-3b --seq-lens 65536 --gradient-checkpointing --steps 3
run ckpt64 50 $B/seqpar bench train $M --seq-lens 65536 --steps 4 --activation-checkpointing
echo "done $SECONDS s"
