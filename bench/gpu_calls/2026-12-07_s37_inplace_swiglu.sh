#!/bin/bash
# Prepared in the thirty-sixth session for the next one (not yet run): the SwiGLU backward in place
# (`ip` = 2026-12-07_s36_inplace_swiglu.patch: d(gate), d(up) over gate, up; the plan's MLP transient one [T, F]
# gradient instead of three). What landing it needs from a GPU: its kernel test, the memory peaks of the shapes the
# plan tests are locked to (tests/train/test_memory_plan.cpp MatchesThePerDirectionRoutesH200Measurements: those
# figures are the H200's; on an H100 the 1B rows fit as they are, the Qwen rows only with another placement), each
# beside its plan (bench prints both), and the Llama-3.2-1B steps with auto's placement (the plan gives 12g4f instead
# of 13g3f at 128K on an H100) beside main's.
#   bash bench/gpu_calls/2026-12-07_s37_inplace_swiglu.sh OUT_DIR   (carry [".devtmp"]; ~400 s)
# Prebuilt: tools/prebuild_gpu.sh gpu; tools/prebuild_gpu.sh ip bench/gpu_calls/2026-12-07_s36_inplace_swiglu.patch
set -u
REAL_OUT=$1
OUT=/tmp/s37ip
mkdir -p $OUT
. "$(dirname "$0")/build_gpu.sh"
trap "pack_logs $OUT $REAL_OUT" EXIT
build_variants $OUT ip=bench/gpu_calls/2026-12-07_s36_inplace_swiglu.patch
SEQPAR_TEST_SOURCE_DIR=$PWD SEQPAR_TEST_BINARY=$PWD/build-ip/seqpar timeout 200 build-ip/test_cuda \
  --gtest_filter='CudaOps.Swiglu*:CudaTrain.FirstStepsMatchTheCpu:CudaTrain.MemoryLeversTrainAlike:CudaTrain.OffloadAndStage3TrainAlike' \
  > $REAL_OUT/ip_tests.log 2>&1
echo "ip tests rc=$?: $(grep -E '^\[  (PASSED|FAILED) ' $REAL_OUT/ip_tests.log | tr '\n' ' ')"
KEEP="--activation-checkpointing --checkpoint-keep-attention --tiled-loss-tokens 8192"
END=${END:-560}
for b in ip gpu; do
  run_bounded ${b}_1b_64k 40 build-$b/seqpar bench train --preset llama-3.2-1b --seq-lens 65536 --steps 2 $KEEP
  run_bounded ${b}_1b_128k 60 build-$b/seqpar bench train --preset llama-3.2-1b --seq-lens 131072 --steps 2 $KEEP
done
for b in ip gpu ip; do
  run_bounded ${b}_1b_128k_auto 70 build-$b/seqpar bench train --preset llama-3.2-1b --seq-lens 131072 --steps 3 $KEEP \
    --checkpoint-placement auto
  run_bounded ${b}_1b_64k_auto 40 build-$b/seqpar bench train --preset llama-3.2-1b --seq-lens 65536 --steps 3 $KEEP \
    --checkpoint-placement auto
done
run_bounded ip_q3_32k_auto 60 build-ip/seqpar bench train --preset qwen3-1.7b --seq-lens 32768 --steps 3 $KEEP \
  --checkpoint-placement auto
run_bounded gpu_q3_32k_auto 60 build-gpu/seqpar bench train --preset qwen3-1.7b --seq-lens 32768 --steps 3 $KEEP \
  --checkpoint-placement auto
echo "done $SECONDS s"
