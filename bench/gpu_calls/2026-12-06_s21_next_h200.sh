#!/bin/bash
# For the next H200 (written in the twenty-first session, not run): issue 17's shapes with the layers not
# checkpointed that the H200's memory allows (`--checkpoint-placement auto`; the plan: 28f at 32K, 6g22f at
# 64K for both Qwen shapes) beside the ALST recipe, and GPT-1.3B's (24f at 32K and 64K) beside transformers.
# PART=qwen (default) or gpt; about 450 s each.
#   PART=qwen bash bench/gpu_calls/2026-12-06_s21_next_h200.sh OUT_DIR
set -u
OUT=$1
. "$(dirname "$0")/build_gpu.sh"
build_gpu $OUT seqpar
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
KEEP="--activation-checkpointing --checkpoint-keep-attention --tiled-loss-tokens 8192"
if [ "${PART:-qwen}" = qwen ]; then
  peer_env $OUT
  for m in qwen2.5-1.5b qwen3-1.7b; do
    for s in 32768 65536; do
      run_bounded ${m}_${s}_auto 45 $B/seqpar bench train --preset $m --seq-lens $s --steps 3 $KEEP --checkpoint-placement auto
      run_bounded ${m}_${s}_alst 110 python3 bench/peers/alst_train_step.py --preset $m --seq-lens $s --steps 3 --torch-adam
    done
  done
else
  for s in 32768 65536; do
    run_bounded gpt_${s}_auto 45 $B/seqpar bench train --preset gpt-1.3b-128k --seq-lens $s --steps 3 $KEEP --checkpoint-placement auto
    run_bounded gpt_${s}_keep 45 $B/seqpar bench train --preset gpt-1.3b-128k --seq-lens $s --steps 3 $KEEP
    run_bounded gpt_${s}_hf 100 python3 bench/peers/hf_train_step.py --preset gpt-1.3b-128k --seq-lens $s --gradient-checkpointing --steps 3
  done
fi
echo "done $SECONDS s"
