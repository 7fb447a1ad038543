#!/bin/bash
# Thirty-fifth session, call 6: the landed tree (dQ one step late) under the whole CUDA suite (the NCCL tests aside),
# then compute-sanitizer's synccheck and memcheck on a backward the sm_90 kernel runs (700 tokens, D = 64, GQA 2).
#   bash bench/gpu_calls/2026-12-07_s35_call6.sh OUT_DIR   (carry [".devtmp"]; ~450 s)
set -u
OUT=$1
. "$(dirname "$0")/build_gpu.sh"
build_gpu $OUT seqpar test_cuda
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
run_tests 320 '-*Nccl*'
grep -E "^\[  (SKIPPED|FAILED) " $OUT/tests.log | head -10
for tool in synccheck memcheck; do
  SEQPAR_TEST_SOURCE_DIR=$PWD timeout 60 compute-sanitizer --tool $tool $B/test_cuda \
    --gtest_filter='CudaAttentionSm90.AutoRoutesToWgmmaBackward' > $OUT/sanitizer_$tool.log 2>&1
  echo "$tool rc=$?: $(grep -E 'ERROR SUMMARY|^\[  (PASSED|FAILED)' $OUT/sanitizer_$tool.log | tr '\n' ' ')"
done
echo "done $SECONDS s"
