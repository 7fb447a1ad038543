#!/bin/bash
# Next GPU call (written in the twentieth session, not run: its device time went on starts that found
# no machine). First the GPU tests the eighteenth session's fused ops never ran (op harness, model,
# training: CudaOpHarness.*, CudaModel.*, CudaTrain.*) on this tree, which now has the sm_90 attention
# kernels on FlashAttention-3's schedule; then issue 16's GPT-1.3B at 64K keeping attention without the
# tiled loss (1.47x transformers with it, on an H100) beside transformers; then Qwen2.5-1.5B at 32K
# keeping attention beside the ALST recipe (issue 17: 1.43x in the eleventh session) if time is left.
#   bash bench/gpu_calls/2026-12-06_s20_call2.sh OUT_DIR
set -u
OUT=$1
. "$(dirname "$0")/build_gpu.sh"
build_gpu $OUT seqpar test_cuda
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
t=$SECONDS
timeout 300 $B/test_cuda --gtest_filter='CudaOpHarness.*:CudaModel.*:CudaTrain.*' > $OUT/test_cuda.log 2>&1
echo "test_cuda rc=$? $((SECONDS - t)) s"
grep -E "^\[  (PASSED|FAILED) |FAILED  \]|tests ran|Failure" $OUT/test_cuda.log | head -20
grep -B3 -A8 "Failure" $OUT/test_cuda.log | head -40
KEEP="--activation-checkpointing --checkpoint-keep-attention"
run_bounded gpt64_keep 60 $B/seqpar bench train --preset gpt-1.3b-128k --seq-lens 65536 --steps 3 $KEEP
run_bounded gpt64_hf 90 python3 bench/peers/hf_train_step.py --preset gpt-1.3b-128k --seq-lens 65536 --gradient-checkpointing --steps 3
peer_env $OUT
run_bounded qwen_keep 50 $B/seqpar bench train --preset qwen2.5-1.5b --seq-lens 32768 --steps 4 $KEEP --tiled-loss-tokens 8192
run_bounded qwen_alst 120 python3 bench/peers/alst_train_step.py --preset qwen2.5-1.5b --seq-lens 32768 --steps 3 --torch-adam
echo "done $SECONDS s"
