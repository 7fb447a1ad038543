#!/bin/bash
# GPU call 2 (eighth session): the initial weights drawn on the GPU (normal_fill, CudaOps.NormalFill*), the
# optimizer offload's state filled by all cores without a whole-model temporary; Llama-3.1-8B at 64K beside
# the ALST recipe with ZeRO-3 + parameter offload + DeepSpeed's partial optimizer offload (ratio 0.6: the
# whole offload was killed by the 125 GiB host in call 1); Llama-3.2-1B at 128K with checkpoint offload beside
# the ALST recipe, same call.
set -u
OUT=$1
B=build-gpu
END=${END:-590}
left() { echo $((END - SECONDS)); }
cap() { local l=$(left); [ $l -lt $1 ] && echo $l || echo $1; }
pip install --no-index --no-deps --target /tmp/site .devtmp/whl/*.whl > $OUT/pip.log 2>&1 || tail -3 $OUT/pip.log
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH
( timeout 240 python3 -c "from deepspeed.ops.op_builder import CPUAdamBuilder; CPUAdamBuilder().load(); print('CPU_ADAM_OK')" ) \
  > $OUT/dsjit.log 2>&1 &
T0=$SECONDS
{ cmake -S . -B $B -G Ninja -DSEQPAR_CUDA=ON -DCMAKE_BUILD_TYPE=Release && cmake --build $B -j 16 --target seqpar test_cuda; } \
  > $OUT/build.log 2>&1 && echo "build ok $((SECONDS - T0)) s" || { echo "BUILD FAILED"; grep -E "error" $OUT/build.log | head -30; exit 1; }
timeout 60 $B/test_cuda --gtest_brief=1 --gtest_filter='CudaOps.NormalFill*' > $OUT/test_cuda.log 2>&1; echo "test_cuda rc=$?"
grep -E "normal_fill|^\[  FAILED|^\[  PASSED|Failure" -A3 $OUT/test_cuda.log | head -20
T2=$SECONDS
timeout $(cap 150) $B/seqpar bench train --preset llama-3.1-8b --seq-lens 65536 --activation-checkpointing \
  --tiled-mlp-tokens 8192 --tiled-loss-tokens 8192 --offload-optimizer cpu --host-memory-gib 120 --steps 2 \
  --out $OUT/train.jsonl > $OUT/bench8b.log 2>&1; echo "seqpar 8B rc=$? $((SECONDS - T2)) s"
grep -E "initial|ready|step " $OUT/bench8b.log | cut -c1-260
wait; grep -E "CPU_ADAM_OK|Error" $OUT/dsjit.log | head -3
T3=$SECONDS
timeout $(cap 240) python3 bench/peers/alst_train_step.py --preset llama-3.1-8b --seq-lens 65536 --zero3-offload \
  --offload-ratio 0.6 --attn sdpa --steps 2 --out $OUT/train.jsonl > $OUT/alst8b.log 2>&1; echo "ALST 8B rc=$? $((SECONDS - T3)) s"
grep -vE "^\s*$|Warning|warn|return func" $OUT/alst8b.log | tail -4 | cut -c1-400
free -g | head -2
T4=$SECONDS
timeout $(cap 80) $B/seqpar bench train --preset llama-3.2-1b --seq-lens 131072 --activation-checkpointing --checkpoint-offload \
  --tiled-mlp-tokens 8192 --tiled-loss-tokens 8192 --host-memory-gib 120 --steps 3 --out $OUT/train.jsonl > $OUT/bench1b.log 2>&1
echo "seqpar 1B 128K offload rc=$? $((SECONDS - T4)) s"; grep -E "error|step " $OUT/bench1b.log | cut -c1-200
T5=$SECONDS
timeout $(cap 100) python3 bench/peers/alst_train_step.py --preset llama-3.2-1b --seq-lens 131072 --attn sdpa --steps 3 \
  --out $OUT/train.jsonl > $OUT/alst1b.log 2>&1; echo "ALST 1B rc=$? $((SECONDS - T5)) s"
grep -vE "^\s*$|Warning|warn|return func" $OUT/alst1b.log | tail -2 | cut -c1-300
cat $OUT/train.jsonl | cut -c1-1000
