#!/bin/bash
# GPU call 1 of the seventh session: build the merged tree; the whole GPU suite (the three fixes made after
# the last session's final call run here first); then, in the time left, Llama-3.1-8B steps with optimizer
# offload against the plan.
set -u
OUT=$1
B=build-gpu
T0=$SECONDS
{ cmake -S . -B $B -G Ninja -DSEQPAR_CUDA=ON -DCMAKE_BUILD_TYPE=Release && cmake --build $B -j 16 -- -k 0; } > $OUT/build.log 2>&1 \
  && echo "build ok $((SECONDS - T0)) s" || { echo "BUILD FAILED"; grep -E "error:|FAILED:" $OUT/build.log | head -30; }
T1=$SECONDS
timeout 280 $B/test_cuda --gtest_brief=1 > $OUT/test_cuda.log 2>&1; echo "test_cuda rc=$? $((SECONDS - T1)) s"
grep -E "^\[  FAILED|^\[  PASSED|^\[  SKIPPED|tests ran|host waits|\[flash\]|\[cudnn\]|ring|degree" $OUT/test_cuda.log | head -80
grep -B3 -A12 "Failure" $OUT/test_cuda.log | head -150
left=$((560 - SECONDS))
echo "left for the 8B bench: $left s"
$B/seqpar plan --preset llama-3.1-8b --seq-len 65536 --activation-checkpointing --tiled-mlp-tokens 8192 \
  --tiled-loss-tokens 8192 --offload-optimizer cpu --host-memory-gib 120 2>&1 | tail -25
if [ $left -gt 90 ]; then
  timeout $((left - 10)) $B/seqpar bench train --preset llama-3.1-8b --seq-lens 65536 --activation-checkpointing \
    --tiled-mlp-tokens 8192 --tiled-loss-tokens 8192 --offload-optimizer cpu --host-memory-gib 120 --steps 2 \
    --out $OUT/train8b.jsonl > $OUT/bench8b.log 2>&1; echo "bench 8B rc=$?"
  tail -15 $OUT/bench8b.log; cat $OUT/train8b.jsonl 2>/dev/null | head -3
fi
