#!/bin/bash
# GPU call 1 (thirteenth session): the tree with fp16 (loss scaler, f16 in cuBLASLt / cuDNN / seqpar's
# own flash kernels) and the leaner layer backward merged. Builds seqpar and test_cuda, runs the GPU
# suite; then issue 14: the Llama-3.2-1B shape at 128K (checkpointing + checkpoint offload + tiled MLP
# and loss 8192; sdpa and flash) beside the ALST recipe in the same call; and fp16 vs bf16 at 32K.
#   bash bench/gpu_calls/2026-12-03_s13_call1.sh OUT_DIR
set -u
OUT=$1
B=build-gpu
U=$PWD/.devtmp/utf8proc
{ cmake -S . -B $B -G Ninja -DSEQPAR_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DUTF8PROC_INCLUDE_DIR=$U \
    -DUTF8PROC_LIBRARY=$U/libutf8proc.a && cmake --build $B -j 16 --target seqpar test_cuda; } > $OUT/build.log 2>&1 \
  && echo "build ok $SECONDS s" || { echo "BUILD FAILED"; grep -E "error" $OUT/build.log | head -30; exit 1; }
t=$SECONDS
timeout 240 $B/test_cuda > $OUT/test_cuda.log 2>&1
echo "test_cuda rc=$? $((SECONDS - t)) s"
grep -E "^\[  (PASSED|FAILED|SKIPPED) |tests ran" $OUT/test_cuda.log | head -30
grep -B3 -A12 "Failure" $OUT/test_cuda.log | head -80
pip install --no-index --no-deps --target /tmp/site .devtmp/whl/*.whl > $OUT/pip.log 2>&1 || tail -3 $OUT/pip.log
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH TORCH_CUDA_ARCH_LIST=9.0
for attn in sdpa flash_attention_2; do
  t=$SECONDS
  timeout 90 $B/seqpar bench train --preset llama-3.2-1b --seq-lens 131072 --activation-checkpointing --checkpoint-offload \
    --tiled-mlp-tokens 8192 --tiled-loss-tokens 8192 --host-memory-gib 120 --attn-implementation $attn --steps 3 \
    --log-level debug --out $OUT/train.jsonl > $OUT/bench1b_$attn.log 2>&1
  echo "seqpar 1B 128K offload $attn rc=$? $((SECONDS - t)) s"
  grep -E "error|device memory|step +[0-9]/|predicted peak" $OUT/bench1b_$attn.log | cut -c1-220
done
t=$SECONDS
timeout 100 python3 bench/peers/alst_train_step.py --preset llama-3.2-1b --seq-lens 131072 --attn sdpa --steps 3 \
  --out $OUT/train.jsonl > $OUT/alst1b.log 2>&1; echo "ALST 1B rc=$? $((SECONDS - t)) s"
grep -vE "^\s*$|Warning|warn|return func" $OUT/alst1b.log | tail -2 | cut -c1-300
for p in bf16 fp16; do
  t=$SECONDS
  timeout 60 $B/seqpar bench train --preset llama-3.2-1b --seq-lens 32768 --activation-checkpointing \
    --tiled-loss-tokens 8192 --mixed-precision $p --steps 4 --out $OUT/train.jsonl > $OUT/prec_$p.log 2>&1
  echo "seqpar 1B 32K $p rc=$? $((SECONDS - t)) s"; grep -E "error|step +[0-9]/" $OUT/prec_$p.log | cut -c1-220
done
cat $OUT/train.jsonl | cut -c1-900
