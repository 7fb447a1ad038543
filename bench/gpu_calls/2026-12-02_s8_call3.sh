#!/bin/bash
# GPU call 3 (eighth session): Llama-3.2-1B at 128K, seqpar with checkpoint offload beside the ALST recipe
# (torch's AdamW under DeepSpeed: DeepSpeed's FusedAdam JIT build fails on this machine's TORCH_CUDA_ARCH_LIST
# "9.0a", call 2); Llama-3.1-8B at 64K beside ALST with ZeRO-3 + parameter offload + partial optimizer
# offload ratio 0.3 (ratios 1.0 and 0.6 were killed by the 125 GiB host in calls 1 and 2).
set -u
OUT=$1
B=build-gpu
END=${END:-470}
left() { echo $((END - SECONDS)); }
cap() { local l=$(left); [ $l -lt $1 ] && echo $l || echo $1; }
pip install --no-index --no-deps --target /tmp/site .devtmp/whl/*.whl > $OUT/pip.log 2>&1 || tail -3 $OUT/pip.log
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH TORCH_CUDA_ARCH_LIST=9.0
T0=$SECONDS
{ cmake -S . -B $B -G Ninja -DSEQPAR_CUDA=ON -DCMAKE_BUILD_TYPE=Release && cmake --build $B -j 16 --target seqpar; } \
  > $OUT/build.log 2>&1 && echo "build ok $((SECONDS - T0)) s" || { echo "BUILD FAILED"; grep -E "error" $OUT/build.log | head -30; exit 1; }
T4=$SECONDS
timeout $(cap 70) $B/seqpar bench train --preset llama-3.2-1b --seq-lens 131072 --activation-checkpointing --checkpoint-offload \
  --tiled-mlp-tokens 8192 --tiled-loss-tokens 8192 --host-memory-gib 120 --steps 3 --out $OUT/train.jsonl > $OUT/bench1b.log 2>&1
echo "seqpar 1B 128K offload rc=$? $((SECONDS - T4)) s"; grep -E "error|step " $OUT/bench1b.log | cut -c1-200
T5=$SECONDS
timeout $(cap 100) python3 bench/peers/alst_train_step.py --preset llama-3.2-1b --seq-lens 131072 --attn sdpa --steps 3 \
  --torch-adam --out $OUT/train.jsonl > $OUT/alst1b.log 2>&1; echo "ALST 1B rc=$? $((SECONDS - T5)) s"
grep -vE "^\s*$|Warning|warn|return func" $OUT/alst1b.log | tail -2 | cut -c1-300
T2=$SECONDS
timeout $(cap 110) $B/seqpar bench train --preset llama-3.1-8b --seq-lens 65536 --activation-checkpointing \
  --tiled-mlp-tokens 8192 --tiled-loss-tokens 8192 --offload-optimizer cpu --host-memory-gib 120 --steps 2 \
  --out $OUT/train.jsonl > $OUT/bench8b.log 2>&1; echo "seqpar 8B rc=$? $((SECONDS - T2)) s"
grep -E "initial|ready|step " $OUT/bench8b.log | cut -c1-260
T3=$SECONDS
( while sleep 10; do free -g | awk 'NR==2{print $3}' >> $OUT/alst8b_host_used_gib.txt; done ) &
MON=$!
timeout $(cap 260) python3 bench/peers/alst_train_step.py --preset llama-3.1-8b --seq-lens 65536 --zero3-offload \
  --offload-ratio 0.3 --attn sdpa --steps 2 --out $OUT/train.jsonl > $OUT/alst8b.log 2>&1; echo "ALST 8B rc=$? $((SECONDS - T3)) s"
kill $MON; echo "host used GiB every 10 s: $(tr '\n' ' ' < $OUT/alst8b_host_used_gib.txt)"
grep -vE "^\s*$|Warning|warn|return func" $OUT/alst8b.log | tail -3 | cut -c1-400
cat $OUT/train.jsonl | cut -c1-1000
