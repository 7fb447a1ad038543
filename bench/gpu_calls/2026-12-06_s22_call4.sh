#!/bin/bash
# GPU call 4 (twenty-second session): RMSNorm's short-row kernels (Qwen3's per-head q/k norms) checked
# against the CPU (the op harness, every CUDA path; the model on every HF fixture), then Qwen3-1.7B at 32K
# and 64K with --checkpoint-placement auto (profiled at 32K: the norms' share before was 58.6 + 26.0 ms of
# a 1498.5 ms step, call 3) beside the ALST recipe at 32K, and the forward GEMMs by shape (the new
# linear_* profile labels) at the Llama-3.2-1B shape, 64K.
#   bash bench/gpu_calls/2026-12-06_s22_call4.sh OUT_DIR
set -u
OUT=$1
. "$(dirname "$0")/build_gpu.sh"
build_gpu $OUT seqpar test_cuda
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
run_tests 150 'CudaOpHarness.EveryOpOnEveryCudaPath:CudaModel.*'
KEEP="--activation-checkpointing --checkpoint-keep-attention --tiled-loss-tokens 8192"
run_bounded q3_32k 45 $B/seqpar bench train --preset qwen3-1.7b --seq-lens 32768 --steps 3 $KEEP --checkpoint-placement auto --profile
grep -E "rmsnorm|^profile" $OUT/q3_32k.log
run_bounded q3_64k 45 $B/seqpar bench train --preset qwen3-1.7b --seq-lens 65536 --steps 3 $KEEP --checkpoint-placement auto
peer_env $OUT
run_bounded q3_32k_alst 110 python3 bench/peers/alst_train_step.py --preset qwen3-1.7b --seq-lens 32768 --steps 3 --torch-adam
END=${END:-590} run_bounded l1b_64k 45 $B/seqpar bench train --preset llama-3.2-1b --seq-lens 65536 --steps 3 $KEEP --profile
grep -E "^linear|^matmul" $OUT/l1b_64k.log | head -24
echo "done $SECONDS s"
