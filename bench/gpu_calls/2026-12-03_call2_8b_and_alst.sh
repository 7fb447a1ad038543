#!/bin/bash
# GPU call 2: the bf16 initial weights and the counter-based init (the 8B run of call 1 was killed for host
# memory while it started); the GPU demo at the new init; Llama-3.1-8B at 64K with optimizer offload beside the
# ALST recipe (ZeRO-3 with optimizer and parameter offload) in the same call; then the 1B shape at 128K.
set -u
OUT=$1
B=build-gpu
T0=$SECONDS
{ cmake -S . -B $B -G Ninja -DSEQPAR_CUDA=ON -DCMAKE_BUILD_TYPE=Release && cmake --build $B -j 16 --target seqpar test_cuda; } \
  > $OUT/build.log 2>&1 && echo "build ok $((SECONDS - T0)) s" || { echo "BUILD FAILED"; grep -E "error:|FAILED:" $OUT/build.log | head -30; exit 1; }
pip install --no-index --no-deps --target /tmp/site .devtmp/whl/*.whl > $OUT/pip.log 2>&1 || tail -3 $OUT/pip.log
export PYTHONPATH=/tmp/site
T1=$SECONDS
timeout 90 $B/test_cuda --gtest_brief=1 --gtest_filter='CudaTrain.*' > $OUT/test_cuda.log 2>&1; echo "CudaTrain rc=$? $((SECONDS - T1)) s"
grep -E "^\[  FAILED|^\[  PASSED|accuracy|Failure" -A3 $OUT/test_cuda.log | head -30
free -g | head -2
T2=$SECONDS
timeout 170 $B/seqpar bench train --preset llama-3.1-8b --seq-lens 65536 --activation-checkpointing \
  --tiled-mlp-tokens 8192 --tiled-loss-tokens 8192 --offload-optimizer cpu --host-memory-gib 120 --steps 3 \
  --out $OUT/train.jsonl > $OUT/bench8b.log 2>&1; echo "seqpar 8B rc=$? $((SECONDS - T2)) s"
tail -6 $OUT/bench8b.log
T3=$SECONDS
timeout 200 python3 bench/peers/alst_train_step.py --preset llama-3.1-8b --seq-lens 65536 --zero3-offload --steps 3 \
  --out $OUT/train.jsonl > $OUT/alst8b.log 2>&1; echo "ALST 8B rc=$? $((SECONDS - T3)) s"
tail -4 $OUT/alst8b.log
left=$((560 - SECONDS))
echo "left for 1B: $left s"
if [ $left -gt 100 ]; then
  timeout $((left / 2)) $B/seqpar bench train --preset llama-3.2-1b --seq-lens 131072 --activation-checkpointing \
    --tiled-mlp-tokens 8192 --tiled-loss-tokens 8192 --steps 3 --out $OUT/train.jsonl > $OUT/bench1b.log 2>&1
  echo "seqpar 1B rc=$?"; tail -3 $OUT/bench1b.log
  timeout $((560 - SECONDS)) python3 bench/peers/alst_train_step.py --preset llama-3.2-1b --seq-lens 131072 --steps 3 \
    --out $OUT/train.jsonl > $OUT/alst1b.log 2>&1; echo "ALST 1B rc=$?"; tail -3 $OUT/alst1b.log
fi
cat $OUT/train.jsonl
