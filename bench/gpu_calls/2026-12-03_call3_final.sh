#!/bin/bash
# GPU call 3 (final): build the merged tree (GPT family, LayerNorm/GELU CUDA kernels, head dim 96); the GPU
# suite; the GPT 1.3B preset at 32K beside transformers' GPT2LMHeadModel; Llama-3.1-8B at 64K with optimizer
# offload (progress now printed) beside the ALST recipe (ZeRO-3 + offload, sdpa: no flash-attn package there).
set -u
OUT=$1
B=build-gpu
END=575
left() { echo $((END - SECONDS)); }
cap() { local l=$(left); [ $l -lt $1 ] && echo $l || echo $1; }
T0=$SECONDS
{ cmake -S . -B $B -G Ninja -DSEQPAR_CUDA=ON -DCMAKE_BUILD_TYPE=Release && cmake --build $B -j 16 --target seqpar test_cuda; } \
  > $OUT/build.log 2>&1 && echo "build ok $((SECONDS - T0)) s" || { echo "BUILD FAILED"; grep -E "error" $OUT/build.log | head -30; exit 1; }
pip install --no-index --no-deps --target /tmp/site .devtmp/whl/*.whl > $OUT/pip.log 2>&1 || tail -3 $OUT/pip.log
export PYTHONPATH=/tmp/site
T1=$SECONDS
timeout $(cap 200) $B/test_cuda --gtest_brief=1 > $OUT/test_cuda.log 2>&1; echo "test_cuda rc=$? $((SECONDS - T1)) s"
grep -E "^\[  FAILED|^\[  PASSED|^\[  SKIPPED|tests ran|worst relative|\[flash\] ring zigzag     P=8|\[cudnn\] ring zigzag     P=8" $OUT/test_cuda.log | head -60
grep -B2 -A10 "Failure" $OUT/test_cuda.log | head -100
T2=$SECONDS
timeout $(cap 50) $B/seqpar bench train --preset gpt-1.3b-32k --seq-lens 32768 --activation-checkpointing --steps 4 \
  --out $OUT/train.jsonl > $OUT/gpt.log 2>&1; echo "seqpar gpt-1.3b rc=$? $((SECONDS - T2)) s"; grep -E "error|initial|ready" $OUT/gpt.log | head -5
T3=$SECONDS
timeout $(cap 60) python3 bench/peers/hf_train_step.py --preset gpt-1.3b-32k --seq-lens 32768 --gradient-checkpointing \
  --steps 4 --out $OUT/train.jsonl > $OUT/hfgpt.log 2>&1; echo "hf gpt-1.3b rc=$? $((SECONDS - T3)) s"; tail -2 $OUT/hfgpt.log | cut -c1-300
T4=$SECONDS
timeout $(cap 140) $B/seqpar bench train --preset llama-3.1-8b --seq-lens 65536 --activation-checkpointing \
  --tiled-mlp-tokens 8192 --tiled-loss-tokens 8192 --offload-optimizer cpu --host-memory-gib 120 --steps 3 \
  --out $OUT/train.jsonl > $OUT/bench8b.log 2>&1; echo "seqpar 8B rc=$? $((SECONDS - T4)) s"
grep -vE "^\s*$" $OUT/bench8b.log | tail -8 | cut -c1-300
T5=$SECONDS
if [ $(left) -gt 60 ]; then
  timeout $(cap 200) python3 bench/peers/alst_train_step.py --preset llama-3.1-8b --seq-lens 65536 --zero3-offload \
    --attn sdpa --steps 3 --out $OUT/train.jsonl > $OUT/alst8b.log 2>&1; echo "ALST 8B rc=$? $((SECONDS - T5)) s"
  grep -vE "^\s*$|Warning|warn" $OUT/alst8b.log | tail -4 | cut -c1-400
fi
cat $OUT/train.jsonl | cut -c1-900
