#!/bin/bash
# GPU call 1 (tenth session): build the typed-settings-groups tree (issue 13) and run the whole GPU suite;
# then the Qwen2.5-1.5B shape at 32K (issue 17) beside transformers' Qwen2ForCausalLM with checkpointing and
# the ALST recipe on Qwen2 (Liger's Qwen2 kernels, TiledMLP, checkpointing), same call.
set -u
OUT=$1
B=build-gpu
END=${END:-580}
left() { echo $((END - SECONDS)); }
cap() { local l=$(left); [ $l -lt $1 ] && echo $l || echo $1; }
T0=$SECONDS
# The GPU machine has no utf8proc (and no package registry): its header and static library travel in
# .devtmp/utf8proc (copied from the development machine's libutf8proc-dev; position-independent).
U=$PWD/.devtmp/utf8proc
{ cmake -S . -B $B -G Ninja -DSEQPAR_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DUTF8PROC_INCLUDE_DIR=$U \
    -DUTF8PROC_LIBRARY=$U/libutf8proc.a && cmake --build $B -j 16 --target seqpar test_cuda; } \
  > $OUT/build.log 2>&1 && echo "build ok $((SECONDS - T0)) s" || { echo "BUILD FAILED"; grep -E "error" $OUT/build.log | head -30; exit 1; }
pip install --no-index --no-deps --target /tmp/site .devtmp/whl/*.whl > $OUT/pip.log 2>&1 || tail -3 $OUT/pip.log
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH TORCH_CUDA_ARCH_LIST=9.0
T1=$SECONDS
timeout $(cap 240) $B/test_cuda --gtest_brief=1 > $OUT/test_cuda.log 2>&1; echo "test_cuda rc=$? $((SECONDS - T1)) s"
grep -E "^\[  FAILED|^\[  PASSED|^\[  SKIPPED|tests ran" $OUT/test_cuda.log | head -30
grep -B2 -A10 "Failure" $OUT/test_cuda.log | head -80
for S in 32768; do
  T2=$SECONDS
  timeout $(cap 60) $B/seqpar bench train --preset qwen2.5-1.5b --seq-lens $S --activation-checkpointing \
    --tiled-loss-tokens 8192 --steps 4 --out $OUT/train.jsonl > $OUT/seqpar_qwen.log 2>&1
  echo "seqpar qwen2.5 $S rc=$? $((SECONDS - T2)) s"; grep -iE "error" $OUT/seqpar_qwen.log | head -3
  T3=$SECONDS
  timeout $(cap 80) python3 bench/peers/hf_train_step.py --preset qwen2.5-1.5b --seq-lens $S --gradient-checkpointing \
    --steps 4 --out $OUT/train.jsonl > $OUT/hf_qwen.log 2>&1; echo "hf qwen2.5 $S rc=$? $((SECONDS - T3)) s"
  tail -2 $OUT/hf_qwen.log | cut -c1-300
  T4=$SECONDS
  timeout $(cap 120) python3 bench/peers/alst_train_step.py --preset qwen2.5-1.5b --seq-lens $S --steps 4 \
    --torch-adam --out $OUT/train.jsonl > $OUT/alst_qwen.log 2>&1; echo "alst qwen2.5 $S rc=$? $((SECONDS - T4)) s"
  grep -vE "^\s*$|Warning|warn" $OUT/alst_qwen.log | tail -4 | cut -c1-400
done
cat $OUT/train.jsonl | cut -c1-700
