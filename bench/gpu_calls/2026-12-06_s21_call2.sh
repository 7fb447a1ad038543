#!/bin/bash
# The twenty-first session's second GPU call: layers not checkpointed ('f', `--checkpoint-placement auto`)
# beside the ALST recipe in the same call. Qwen2.5-1.5B at 32K (issue 17) and Llama-3.2-1B at 64K (issue
# 15), keeping attention, every layer 'g' and auto; the ALST recipe on each. Then the epilogues' before /
# after on GPT-1.3B at 64K (the five files as of e2802b6~1, carried in .devtmp/base_s21), if time is left.
#   bash bench/gpu_calls/2026-12-06_s21_call2.sh OUT_DIR
set -u
OUT=$1
. "$(dirname "$0")/build_gpu.sh"
build_gpu $OUT seqpar
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
peer_env $OUT
KEEP="--activation-checkpointing --checkpoint-keep-attention --tiled-loss-tokens 8192"
Q="bench train --preset qwen2.5-1.5b --seq-lens 32768 --steps 4 $KEEP"
run_bounded qwen_keep 50 $B/seqpar $Q
run_bounded qwen_auto 50 $B/seqpar $Q --checkpoint-placement auto
run_bounded qwen_alst 120 python3 bench/peers/alst_train_step.py --preset qwen2.5-1.5b --seq-lens 32768 --steps 3 --torch-adam
L="bench train --preset llama-3.2-1b --seq-lens 65536 --steps 3 $KEEP"
run_bounded l1b_keep 50 $B/seqpar $L
run_bounded l1b_auto 50 $B/seqpar $L --checkpoint-placement auto
run_bounded l1b_alst 120 python3 bench/peers/alst_train_step.py --preset llama-3.2-1b --seq-lens 65536 --steps 3 --torch-adam
if [ $((SECONDS + 170)) -le "${END:-590}" ]; then  # the epilogues' before / after
  GPT="bench train --preset gpt-1.3b-128k --seq-lens 65536 --steps 3 --activation-checkpointing --checkpoint-keep-attention"
  run_bounded gpt64_keep 70 $B/seqpar $GPT
  FILES="src/kernels/ops.h src/kernels/ops.cpp src/kernels/cuda/ops_cuda.h src/kernels/cuda/matmul.cpp src/model/llama.cpp"
  mkdir -p /tmp/keep && for f in $FILES; do mkdir -p /tmp/keep/$(dirname $f); cp $f /tmp/keep/$f; cp .devtmp/base_s21/$f $f; done
  t=$SECONDS
  cmake --build $B -j 16 --target seqpar > $OUT/build_old.log 2>&1 && cp $B/seqpar /tmp/seqpar.old && echo "old build $((SECONDS - t)) s"
  for f in $FILES; do cp /tmp/keep/$f $f; done
  [ -x /tmp/seqpar.old ] && run_bounded gpt64_keep_old 70 /tmp/seqpar.old $GPT
  # The build's objects are now the old files': build the tree again here (a later call copies the sources
  # with their older times, and ninja would keep the old objects; the twenty-first session's call E did).
  cmake --build $B -j 16 --target seqpar > $OUT/build_again.log 2>&1 && echo "rebuilt the tree's seqpar"
fi
echo "done $SECONDS s"
