#!/bin/bash
# GPU call 5 (fourteenth session): the whole GPU suite on the final tree (the model's per-layer
# placement, the offload queue's change, the plan's cuDNN term).
#   bash bench/gpu_calls/2026-12-04_s14_call5.sh OUT_DIR
set -u
OUT=$1
B=build-gpu
U=$PWD/.devtmp/utf8proc
{ cmake -S . -B $B -G Ninja -DSEQPAR_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DUTF8PROC_INCLUDE_DIR=$U \
    -DUTF8PROC_LIBRARY=$U/libutf8proc.a && cmake --build $B -j 16 --target seqpar test_cuda; } > $OUT/build.log 2>&1 \
  && echo "build ok $SECONDS s" || { echo "BUILD FAILED"; grep -E "error" $OUT/build.log | head -30; exit 1; }
t=$SECONDS
timeout 220 $B/test_cuda > $OUT/test_cuda.log 2>&1
echo "test_cuda rc=$? $((SECONDS - t)) s"; grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure|tests ran" $OUT/test_cuda.log | head -20
