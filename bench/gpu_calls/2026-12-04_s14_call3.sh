#!/bin/bash
# GPU call 3 (fourteenth session): the Llama-3.2-1B shape at 640K tokens, one full step (the
# longest whose step fits a 10-minute call beside the build), the layer inputs placed by auto; then
# the Llama-3.1-8B shape at 64K, two steps (optimizer offload), for the plan against both peaks.
#   bash bench/gpu_calls/2026-12-04_s14_call3.sh OUT_DIR
set -u
OUT=$1
. "$(dirname "$0")/build_gpu.sh"
build_gpu $OUT seqpar
T="--tiled-mlp-tokens 8192 --tiled-loss-tokens 8192 --host-memory-gib 120"
t=$SECONDS
timeout 360 $B/seqpar bench train --preset llama-3.2-1b --seq-lens 655360 --activation-checkpointing $T \
  --checkpoint-placement auto --steps 1 --log-level debug --out $OUT/train.jsonl > $OUT/bench1b.log 2>&1
echo "seqpar 1B 640K rc=$? $((SECONDS - t)) s"
grep -E "error|step +[0-9]/|in use|placement" $OUT/bench1b.log | cut -c1-240 | tail -6
t=$SECONDS
timeout 120 $B/seqpar bench train --preset llama-3.1-8b --seq-lens 65536 --activation-checkpointing $T \
  --offload-optimizer cpu --steps 2 --log-level debug --out $OUT/train.jsonl > $OUT/bench8b.log 2>&1
echo "seqpar 8B 64K rc=$? $((SECONDS - t)) s"
grep -E "error|step +[0-9]/|in use|ready" $OUT/bench8b.log | cut -c1-240 | tail -6
cat $OUT/train.jsonl | cut -c1-1400
