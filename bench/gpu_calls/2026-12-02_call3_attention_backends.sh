#!/bin/bash
# GPU call 3: build; the no-host-wait test; attention backends side by side; 1B steps by backend.
set -u
OUT=$1
B=build-gpu
{ cmake -S . -B $B -G Ninja -DSEQPAR_CUDA=ON -DCMAKE_BUILD_TYPE=Release && cmake --build $B -j 16 -- -k 0; } > $OUT/build.log 2>&1 || { echo BUILD FAILED; grep -E "error|FAILED" $OUT/build.log | head -20; }
$B/test_cuda --gtest_filter='CudaTrain.NoHostWait*:CudaOps.*Bad*' 2>&1 | grep -E "OK|FAILED|host waits" > $OUT/tests.txt
for be in flash cudnn; do
  $B/seqpar bench attention --backend $be --seq-lens 2048,4096,16384,65536 --head-dims 64,128 --heads 32 --kv-heads 8 --out $OUT/attention.jsonl > /dev/null 2>> $OUT/bench_err.txt
done
for impl in flash_attention_2 sdpa; do
  $B/seqpar bench train --preset llama-3.2-1b --seq-lens 16384,65536 --steps 4 --activation-checkpointing --tiled-loss-tokens 4096 --attn-implementation $impl --out $OUT/train.jsonl > /dev/null 2>> $OUT/bench_err.txt
done
cat $OUT/tests.txt
python3 - $OUT <<'PY'
import json, sys
out = sys.argv[1]
rows = [json.loads(l) for l in open(out + "/attention.jsonl") if l.startswith("{")]
for r in rows:
    print({k: r.get(k) for k in ("impl", "S", "D", "pass", "ms", "tflops") if k in r})
for l in open(out + "/train.jsonl"):
    if l.startswith("{"):
        r = json.loads(l)
        print({k: r.get(k) for k in ("attn_implementation", "seq_len", "step_ms", "tokens_per_s_per_gpu", "tflops_per_gpu", "peak_mem_gib", "error") if k in r})
PY
tail -5 $OUT/bench_err.txt
