#!/bin/bash
# GPU call 5 (fourteenth session): the whole GPU suite on the final tree (the model's per-layer
# placement, the offload queue's change, the plan's cuDNN term).
#   bash bench/gpu_calls/2026-12-04_s14_call5.sh OUT_DIR
set -u
OUT=$1
. "$(dirname "$0")/build_gpu.sh"
build_gpu $OUT seqpar test_cuda
t=$SECONDS
timeout 220 $B/test_cuda > $OUT/test_cuda.log 2>&1
echo "test_cuda rc=$? $((SECONDS - t)) s"; grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure|tests ran" $OUT/test_cuda.log | head -20
