#!/bin/bash
# GPU call 2 (twelfth session), issue 14: what stays allocated between steps of the Llama-3.2-1B shape at
# 128K with checkpoint offload (the debug line of each step's end), sdpa and the flash kernel, and without
# checkpoint offload, to place the 1 GiB the peak rises by from the second step on.
#   bash bench/gpu_calls/2026-12-03_s12_call2.sh OUT_DIR
set -u
OUT=$1
B=build-gpu
U=$PWD/.devtmp/utf8proc
{ cmake -S . -B $B -G Ninja -DSEQPAR_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DUTF8PROC_INCLUDE_DIR=$U \
    -DUTF8PROC_LIBRARY=$U/libutf8proc.a && cmake --build $B -j 16 --target seqpar; } > $OUT/build.log 2>&1 \
  && echo "build ok $SECONDS s" || { echo "BUILD FAILED"; grep -E "error" $OUT/build.log | head -30; exit 1; }
for v in "sdpa --checkpoint-offload" "flash_attention_2 --checkpoint-offload" "sdpa"; do
  set -- $v
  timeout 100 $B/seqpar bench train --preset llama-3.2-1b --seq-lens 131072 --activation-checkpointing \
    --tiled-mlp-tokens 8192 --tiled-loss-tokens 8192 --attn-implementation $v --steps 3 --log-level debug \
    > $OUT/diag.log 2>&1
  echo "== $v rc=$?"
  grep -E "device memory|step +[0-9]/" $OUT/diag.log | cut -c1-200
done
