#!/bin/bash
# GPU call 1 (twelfth session): the tree with rope_scaling (linear/dynamic/yarn/longrope, the rope op's
# scale on CUDA) merged: build seqpar and test_cuda, run the GPU suite; then a diagnostic for issue 14
# (Llama-3.2-1B shape at 128K with checkpoint offload): each step's allocator peak and the cuDNN plans'
# workspace bytes (debug log), with the flash kernel (attn_implementation flash_attention_2) and with sdpa.
#   bash bench/gpu_calls/2026-12-03_s12_call1.sh OUT_DIR
set -u
OUT=$1
B=build-gpu
T0=$SECONDS
U=$PWD/.devtmp/utf8proc
{ cmake -S . -B $B -G Ninja -DSEQPAR_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DUTF8PROC_INCLUDE_DIR=$U \
    -DUTF8PROC_LIBRARY=$U/libutf8proc.a && cmake --build $B -j 16 --target seqpar test_cuda; } \
  > $OUT/build.log 2>&1 && echo "build ok $((SECONDS - T0)) s" || { echo "BUILD FAILED"; grep -E "error" $OUT/build.log | head -30; exit 1; }
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
t=$SECONDS
timeout 300 $B/test_cuda > $OUT/test_cuda.log 2>&1
echo "test_cuda rc=$? $((SECONDS - t)) s"
grep -E "^\[  (PASSED|FAILED|SKIPPED) |tests ran" $OUT/test_cuda.log | head -20
grep -cE "^\[       OK" $OUT/test_cuda.log
for A in flash_attention_2 sdpa; do
  t=$SECONDS
  timeout 100 $B/seqpar bench train --preset llama-3.2-1b --seq-lens 131072 --activation-checkpointing \
    --checkpoint-offload --tiled-mlp-tokens 8192 --tiled-loss-tokens 8192 --attn-implementation $A --steps 3 \
    --log-level debug --out $OUT/train.jsonl > $OUT/diag_$A.log 2>&1
  echo "1b 128k $A rc=$? $((SECONDS - t)) s"
  grep -iE "workspace|peak" $OUT/diag_$A.log | grep -v autotune | cut -c1-240 | head -12
done
python3 - $OUT/train.jsonl <<'PY'
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    print(r.get("attn_implementation"), r.get("seq_len"), "step_ms", r.get("step_ms"), "peak", r.get("peak_mem_gib"),
          "plan", r.get("plan_peak_gib"), "host", r.get("host_peak_gib"), str(r.get("error", ""))[:200])
PY
