#!/bin/bash
# GPU call 2 (thirteenth session): the op harness again after the f16 start-gradient fix, and the
# ALST recipe at 128K on the Llama-3.2-1B shape with a longer limit (call 1's 100 s ran out), beside
# seqpar's sdpa run of the same shape in the same call.
#   bash bench/gpu_calls/2026-12-03_s13_call2.sh OUT_DIR
set -u
OUT=$1
B=build-gpu
U=$PWD/.devtmp/utf8proc
{ cmake -S . -B $B -G Ninja -DSEQPAR_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DUTF8PROC_INCLUDE_DIR=$U \
    -DUTF8PROC_LIBRARY=$U/libutf8proc.a && cmake --build $B -j 16 --target seqpar test_cuda; } > $OUT/build.log 2>&1 \
  && echo "build ok $SECONDS s" || { echo "BUILD FAILED"; grep -E "error" $OUT/build.log | head -30; exit 1; }
timeout 120 $B/test_cuda --gtest_filter='CudaOpHarness.*' > $OUT/test_cuda.log 2>&1
echo "test_cuda (CudaOpHarness.*) rc=$?"; grep -E "^\[  (PASSED|FAILED) |Failure" $OUT/test_cuda.log | head -10
pip install --no-index --no-deps --target /tmp/site .devtmp/whl/*.whl > $OUT/pip.log 2>&1 || tail -3 $OUT/pip.log
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH TORCH_CUDA_ARCH_LIST=9.0
t=$SECONDS
timeout 80 $B/seqpar bench train --preset llama-3.2-1b --seq-lens 131072 --activation-checkpointing --checkpoint-offload \
  --tiled-mlp-tokens 8192 --tiled-loss-tokens 8192 --host-memory-gib 120 --steps 3 --out $OUT/train.jsonl > $OUT/bench1b.log 2>&1
echo "seqpar 1B 128K offload sdpa rc=$? $((SECONDS - t)) s"; grep -E "error|step +[0-9]/" $OUT/bench1b.log | cut -c1-200
t=$SECONDS
timeout 260 python3 bench/peers/alst_train_step.py --preset llama-3.2-1b --seq-lens 131072 --attn sdpa --steps 3 \
  --out $OUT/train.jsonl > $OUT/alst1b.log 2>&1; echo "ALST 1B rc=$? $((SECONDS - t)) s"
grep -vE "^\s*$|Warning|warn|return func|Backend impl" $OUT/alst1b.log | tail -4 | cut -c1-300
cat $OUT/train.jsonl | cut -c1-900
