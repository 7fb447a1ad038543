#!/bin/bash
# GPU call 4 (fourteenth session): one more attempt at an 8B peer — the ALST recipe with DeepSpeed
# ZeRO-3, offload_param and partial offload_optimizer (ratio 0.3, DeepSpeed's CPU Adam) at 64K with a
# longer limit than the eighth session's 212 s — beside seqpar's 8B 64K step in the same call.
#   bash bench/gpu_calls/2026-12-04_s14_call4.sh OUT_DIR
set -u
OUT=$1
. "$(dirname "$0")/build_gpu.sh"
build_gpu $OUT seqpar
pip install --no-index --no-deps --target /tmp/site .devtmp/whl/*.whl > $OUT/pip.log 2>&1 || tail -3 $OUT/pip.log
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH TORCH_CUDA_ARCH_LIST=9.0
t=$SECONDS
timeout 100 $B/seqpar bench train --preset llama-3.1-8b --seq-lens 65536 --activation-checkpointing --tiled-mlp-tokens 8192 \
  --tiled-loss-tokens 8192 --offload-optimizer cpu --host-memory-gib 120 --steps 2 --out $OUT/train.jsonl > $OUT/bench8b.log 2>&1
echo "seqpar 8B 64K rc=$? $((SECONDS - t)) s"; grep -E "error|step +[0-9]/" $OUT/bench8b.log | cut -c1-200
t=$SECONDS
( while sleep 15; do echo "$((SECONDS - t)) s: host used $(free -m | awk '/Mem:/{print $3}') MiB"; done ) > $OUT/host.log 2>&1 &
W=$!
timeout 290 python3 bench/peers/alst_train_step.py --preset llama-3.1-8b --seq-lens 65536 --zero3-offload \
  --offload-ratio 0.3 --attn sdpa --steps 2 --out $OUT/train.jsonl > $OUT/alst8b.log 2>&1
echo "ALST 8B rc=$? $((SECONDS - t)) s"; kill $W
grep -vE "^\s*$|Warning|warn|return func|Backend impl" $OUT/alst8b.log | tail -6 | cut -c1-300
tail -5 $OUT/host.log
cat $OUT/train.jsonl | cut -c1-1200
