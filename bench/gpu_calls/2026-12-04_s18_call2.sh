#!/bin/bash
# GPU call 2 (eighteenth session): call 1's GPU tests ran past their limit with no log back; here
# the same filter with a longer limit, the summary on stdout (failures, totals, the slow tests).
#   bash bench/gpu_calls/2026-12-04_s18_call2.sh OUT_DIR
set -u
OUT=$1
. "$(dirname "$0")/build_gpu.sh"
build_gpu $OUT test_cuda
t=$SECONDS
timeout 480 $B/test_cuda --gtest_filter='CudaOpHarness.*:CudaModel.*:CudaTrain.*' > $OUT/test_cuda.log 2>&1
echo "test_cuda rc=$? $((SECONDS - t)) s"
grep -E "^\[  (PASSED|FAILED) |FAILED  \]|tests ran|Failure|error" $OUT/test_cuda.log | head -40
grep -E "^\[       OK \]" $OUT/test_cuda.log | awk '{t=$(NF-1); gsub(/\(/,"",t); if (t+0 > 5000) print}' | head -30
tail -3 $OUT/test_cuda.log
