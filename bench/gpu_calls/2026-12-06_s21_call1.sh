#!/bin/bash
# The twenty-first session's first GPU call. (1) The linear layers' cuBLASLt epilogues (bias, GELU_AUX(_BIAS),
# DGELU) on a GPU for the first time: their tests (the fused path is taken; the op harness's linear cases on
# every CUDA path) with the eighteenth session's never-run op harness / model / training tests. (2) GPT-1.3B at
# 64K keeping attention beside transformers (issue 16: 1.47x in the twentieth session, on an H100, with the
# tiled loss). (3) Layers not checkpointed: Qwen2.5-1.5B at 32K keeping attention, every layer 'g' (the
# eleventh session's 1.43x mode) and `--checkpoint-placement auto` (the plan's most 'f' layers), same call.
#   bash bench/gpu_calls/2026-12-06_s21_call1.sh OUT_DIR
set -u
OUT=$1
. "$(dirname "$0")/build_gpu.sh"
build_gpu $OUT seqpar test_cuda
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
t=$SECONDS
timeout 150 $B/test_cuda --gtest_filter='CudaOps.Linear*:CudaOpHarness.EveryOpOnEveryCudaPath:CudaModel.*:CudaTrain.*' \
  > $OUT/test_cuda.log 2>&1
echo "test_cuda rc=$? $((SECONDS - t)) s"
grep -E "^\[  (PASSED|FAILED) |FAILED  \]|tests ran|Failure|^\[       OK" $OUT/test_cuda.log | head -30
grep -B3 -A8 "Failure" $OUT/test_cuda.log | head -60
KEEP="--activation-checkpointing --checkpoint-keep-attention"
run_bounded gpt64_keep 70 $B/seqpar bench train --preset gpt-1.3b-128k --seq-lens 65536 --steps 3 $KEEP
run_bounded gpt64_hf 90 python3 bench/peers/hf_train_step.py --preset gpt-1.3b-128k --seq-lens 65536 \
  --gradient-checkpointing --steps 3
Q="bench train --preset qwen2.5-1.5b --seq-lens 32768 --steps 4 $KEEP --tiled-loss-tokens 8192"
run_bounded qwen_keep 50 $B/seqpar $Q
run_bounded qwen_auto 50 $B/seqpar $Q --checkpoint-placement auto
echo "done $SECONDS s"
