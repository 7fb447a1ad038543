#!/bin/bash
# GPU call 2: the whole GPU suite, then the demo with flash and sdpa over seeds.
set -u
OUT=$1
GPU_CHECK_ONLY=tests,ctest GPU_CHECK_BUDGET=400 GPU_CHECK_TEST_TIMEOUT=200 tools/gpu_check.sh $OUT/gc > $OUT/gc.out 2>&1
{
  cat $OUT/gc/summary.txt
  grep -E "^\[  FAILED|host waits in|\[flash\]|\[cudnn\]" $OUT/gc/test_cuda.log; grep -E "tests passed|FAILED|Failed|\*\*\*" $OUT/gc/ctest.log | head -20
} > $OUT/report.txt
rm -f $OUT/gc/bench.jsonl $OUT/gc/attention.jsonl $OUT/gc/sp_attention.jsonl $OUT/gc/summary.txt
{
  for impl in flash_attention_2 sdpa; do
    for seed in 1 2 3; do
      echo "== demo --attn-implementation $impl --seed $seed"
      timeout 60 build-gpu/seqpar train --device cuda --head-dim 64 --seed $seed --attn-implementation $impl \
        --log-every 100 --eval-every 100 2>&1 | grep -E "eval|done|error" | tail -8
    done
  done
  for impl in flash_attention_2 sdpa; do
    echo "== demo --sp 1 --attn-implementation $impl --seed 1"
    timeout 60 build-gpu/seqpar train --device cuda --head-dim 64 --sp 1 --seed 1 --attn-implementation $impl \
      --log-every 100 --eval-every 100 2>&1 | grep -E "eval|done|error" | tail -8
  done
} > $OUT/demo.txt 2>&1
cat $OUT/report.txt $OUT/demo.txt
