#!/bin/bash
# For the next GPU call (written in the twenty-second session after its device time ran out, not run):
# the fused AdamW pass (adamw_step_rounded on CUDA, the per-tensor state in one buffer) and GEMM autotuning into
# the call's own output checked against the CPU (the op harness's autotuned paths, in-place accumulations
# among them) and in training, then its step time in the profile of Qwen3-1.7B at 32K (call 5 before it:
# adamw_step 17.5 ms + cast 4.7 ms a step, 310 calls each; step 1424.1 ms on an H100).
#   bash bench/gpu_calls/2026-12-06_s22_verify_adamw.sh OUT_DIR
set -u
OUT=$1
. "$(dirname "$0")/build_gpu.sh"
build_gpu $OUT seqpar test_cuda
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
run_tests 200 'CudaOpHarness.EveryOpOnEveryCudaPath:CudaTrain.*:CudaModel.*'
KEEP="--activation-checkpointing --checkpoint-keep-attention --tiled-loss-tokens 8192"
run_bounded q3_32k 45 $B/seqpar bench train --preset qwen3-1.7b --seq-lens 32768 --steps 3 $KEEP --checkpoint-placement auto --profile
grep -E "adamw|^cast|^profile" $OUT/q3_32k.log
# GEMM tuning into the call's own output: step 1's peak should now equal the plan (call 5: 75.87 GiB at step 1,
# 73.56 after and in the plan; Qwen2.5 32K 75.02 / 72.70).
grep -E "memory plan|step +[12]/" $OUT/q3_32k.log
run_bounded q25_32k 45 $B/seqpar bench train --preset qwen2.5-1.5b --seq-lens 32768 --steps 3 $KEEP --checkpoint-placement auto
grep -E "memory plan|step +[12]/" $OUT/q25_32k.log
echo "done $SECONDS s"
