#!/bin/bash
# GPU call 1 (eighth session): build; the op harness (the CUDA norms' shared code, first run on a GPU) and
# CudaAttention.RejectsBadInputs (D = 80); Llama-3.1-8B at 64K with optimizer offload beside the ALST
# recipe with DeepSpeed ZeRO-3 + optimizer/parameter offload, same call. DeepSpeed's CPU Adam JIT-builds
# in the background while seqpar builds; if it fails, the peer runs torch's AdamW on the CPU (--torch-adam).
set -u
OUT=$1
B=build-gpu
END=${END:-585}
left() { echo $((END - SECONDS)); }
cap() { local l=$(left); [ $l -lt $1 ] && echo $l || echo $1; }
pip install --no-index --no-deps --target /tmp/site .devtmp/whl/*.whl > $OUT/pip.log 2>&1 || tail -3 $OUT/pip.log
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH
( python3 -c "import sysconfig,os; p=sysconfig.get_paths()['include']; print('Python.h', os.path.exists(p+'/Python.h'))"
  timeout 240 python3 -c "from deepspeed.ops.op_builder import CPUAdamBuilder; CPUAdamBuilder().load(); print('CPU_ADAM_OK')" ) \
  > $OUT/dsjit.log 2>&1 &
JIT=$!
T0=$SECONDS
{ cmake -S . -B $B -G Ninja -DSEQPAR_CUDA=ON -DCMAKE_BUILD_TYPE=Release && cmake --build $B -j 16 --target seqpar test_cuda; } \
  > $OUT/build.log 2>&1 && echo "build ok $((SECONDS - T0)) s" || { echo "BUILD FAILED"; grep -E "error" $OUT/build.log | head -30; exit 1; }
T1=$SECONDS
timeout $(cap 120) $B/test_cuda --gtest_brief=1 --gtest_filter='CudaOpHarness.*:CudaAttention.RejectsBadInputs' \
  > $OUT/test_cuda.log 2>&1; echo "test_cuda rc=$? $((SECONDS - T1)) s"
grep -E "^\[  FAILED|^\[  PASSED|^\[  SKIPPED|tests ran" $OUT/test_cuda.log | head -20
grep -B2 -A10 "Failure" $OUT/test_cuda.log | head -60
free -g | head -2
T2=$SECONDS
timeout $(cap 230) $B/seqpar bench train --preset llama-3.1-8b --seq-lens 65536 --activation-checkpointing \
  --tiled-mlp-tokens 8192 --tiled-loss-tokens 8192 --offload-optimizer cpu --host-memory-gib 120 --steps 2 \
  --out $OUT/train.jsonl > $OUT/bench8b.log 2>&1; echo "seqpar 8B rc=$? $((SECONDS - T2)) s"
grep -vE "^\s*$" $OUT/bench8b.log | tail -12 | cut -c1-300
wait $JIT; cat $OUT/dsjit.log | grep -E "Python.h|CPU_ADAM_OK|Error|error" | head -5
ADAM=""; grep -q CPU_ADAM_OK $OUT/dsjit.log || ADAM="--torch-adam"
T5=$SECONDS
timeout $(cap 400) python3 bench/peers/alst_train_step.py --preset llama-3.1-8b --seq-lens 65536 --zero3-offload \
  --attn sdpa --steps 2 $ADAM --out $OUT/train.jsonl > $OUT/alst8b.log 2>&1; echo "ALST 8B $ADAM rc=$? $((SECONDS - T5)) s"
grep -vE "^\s*$|Warning|warn" $OUT/alst8b.log | tail -5 | cut -c1-400
cat $OUT/train.jsonl | cut -c1-1200
