#!/bin/bash
# For the next H200 (written in the twenty-second session, not run): the issues' figures on the card they
# name, each seqpar run beside its peer in the same call. About 400-560 s per part; OUT files stay under 8.
#   PART=gpt   issue 16: GPT-1.3B (Megatron's shape, gpt-1.3b-128k preset) at 32K, 64K, 128K with
#              --checkpoint-placement auto (the plan: 24f, 24f, 13g11f) beside transformers' GPT2LMHeadModel
#              (sdpa, gradient checkpointing; 128K may not fit it).
#   PART=qwen  issue 17: Qwen2.5-1.5B and Qwen3-1.7B at 32K and 64K with auto beside the ALST recipe.
#   PART=llama issue 15: Llama-3.2-1B at 64K (keeping attention: today's mode, and auto) and 128K beside the
#              ALST recipe and transformers.
#   PART=gpt bash bench/gpu_calls/2026-12-06_s22_next_h200.sh OUT_DIR
set -u
OUT=$1
. "$(dirname "$0")/build_gpu.sh"
build_gpu $OUT seqpar
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
KEEP="--activation-checkpointing --checkpoint-keep-attention --tiled-loss-tokens 8192"
case "${PART:-gpt}" in
gpt)
  # Bounds per length (seqpar, transformers): a 128K step takes ~17 s for seqpar on an H100 (twentieth session).
  for sl in 32768:45:90 65536:60:120 131072:120:200; do
    IFS=: read s ls lh <<< "$sl"
    run_bounded gpt_${s} $ls $B/seqpar bench train --preset gpt-1.3b-128k --seq-lens $s --steps 3 $KEEP --checkpoint-placement auto
    run_bounded gpt_${s}_hf $lh python3 bench/peers/hf_train_step.py --preset gpt-1.3b-128k --seq-lens $s --gradient-checkpointing --steps 3
  done ;;
qwen)
  peer_env $OUT
  for m in qwen2.5-1.5b qwen3-1.7b; do
    for s in 32768 65536; do
      run_bounded ${m}_${s} 45 $B/seqpar bench train --preset $m --seq-lens $s --steps 3 $KEEP --checkpoint-placement auto
      run_bounded ${m}_${s}_alst 100 python3 bench/peers/alst_train_step.py --preset $m --seq-lens $s --steps 3 --torch-adam
    done
  done ;;
llama)
  peer_env $OUT
  M="--preset llama-3.2-1b"
  run_bounded l64_keep 45 $B/seqpar bench train $M --seq-lens 65536 --steps 3 $KEEP
  run_bounded l64_auto 45 $B/seqpar bench train $M --seq-lens 65536 --steps 3 $KEEP --checkpoint-placement auto
  run_bounded l64_alst 90 python3 bench/peers/alst_train_step.py $M --seq-lens 65536 --steps 3 --torch-adam
  run_bounded l128_keep 90 $B/seqpar bench train $M --seq-lens 131072 --steps 3 $KEEP --tiled-mlp-tokens 8192
  run_bounded l128_alst 200 python3 bench/peers/alst_train_step.py $M --seq-lens 131072 --steps 3 --torch-adam ;;
esac
echo "done $SECONDS s"
