#!/bin/bash
# The twenty-first session's first GPU call: the linear layers' cuBLASLt epilogues (bias, GELU_AUX(_BIAS),
# DGELU; commit e2802b6) on a GPU for the first time. Their tests (the fused path is taken; the op harness's
# linear cases on every CUDA path) with the eighteenth session's never-run op harness / model / training
# tests; then GPT-1.3B at 64K keeping attention beside transformers (issue 16: 1.47x in the twentieth
# session, on an H100, with the tiled loss), and, if time is left, the same run on the tree before the
# epilogues (the five files as of e2802b6~1, carried in .devtmp/base_s21) for the before / after. On an
# H200, first Qwen2.5-1.5B at 32K without checkpointing beside the ALST recipe (issue 17).
#   bash bench/gpu_calls/2026-12-06_s21_call1.sh OUT_DIR
set -u
OUT=$1
. "$(dirname "$0")/build_gpu.sh"
build_gpu $OUT seqpar test_cuda
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
t=$SECONDS
timeout 170 $B/test_cuda --gtest_filter='CudaOps.Linear*:CudaOpHarness.EveryOpOnEveryCudaPath:CudaModel.*:CudaTrain.*' \
  > $OUT/test_cuda.log 2>&1
echo "test_cuda rc=$? $((SECONDS - t)) s"
grep -E "^\[  (PASSED|FAILED) |FAILED  \]|tests ran|Failure" $OUT/test_cuda.log | head -20
grep -B3 -A8 "Failure" $OUT/test_cuda.log | head -60
KEEP="--activation-checkpointing --checkpoint-keep-attention"
GPT="bench train --preset gpt-1.3b-128k --seq-lens 65536 --steps 3 $KEEP"
run_bounded gpt64_keep 70 $B/seqpar $GPT
run_bounded gpt64_hf 90 python3 bench/peers/hf_train_step.py --preset gpt-1.3b-128k --seq-lens 65536 \
  --gradient-checkpointing --steps 3
MEM=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
if [ "$MEM" -gt 100000 ]; then  # an H200: Qwen2.5-1.5B at 32K without checkpointing (plan 91 GiB) beside ALST
  peer_env $OUT
  run_bounded qwen_nockpt 50 $B/seqpar bench train --preset qwen2.5-1.5b --seq-lens 32768 --steps 4 --tiled-loss-tokens 8192
  run_bounded qwen_alst 120 python3 bench/peers/alst_train_step.py --preset qwen2.5-1.5b --seq-lens 32768 --steps 3 --torch-adam
fi
if [ $((SECONDS + 170)) -le "${END:-590}" ]; then  # before: the same tree without the epilogues
  cp $B/seqpar /tmp/seqpar.new
  FILES="src/kernels/ops.h src/kernels/ops.cpp src/kernels/cuda/ops_cuda.h src/kernels/cuda/matmul.cpp src/model/llama.cpp"
  mkdir -p /tmp/keep && for f in $FILES; do mkdir -p /tmp/keep/$(dirname $f); cp $f /tmp/keep/$f; cp .devtmp/base_s21/$f $f; done
  t=$SECONDS
  cmake --build $B -j 16 --target seqpar > $OUT/build_old.log 2>&1 && cp $B/seqpar /tmp/seqpar.old && echo "old build $((SECONDS - t)) s"
  for f in $FILES; do cp /tmp/keep/$f $f; done
  [ -x /tmp/seqpar.old ] && run_bounded gpt64_keep_old 70 /tmp/seqpar.old $GPT
fi
echo "done $SECONDS s"
