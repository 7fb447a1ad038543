#!/bin/bash
# GPU call 5 (twenty-second session): the tiled loss's backward in the forward (one LM head GEMM per
# tile instead of two). test_cuda CudaTrain.* (the memory levers with a tiled loss, the overlapped
# optimizer step, ZeRO-3 and offload on the GPU, no host wait inside a step), then the shapes of
# calls 1-4 again (plan against measured peak; the profile at Qwen3 32K shows the LM head's calls),
# and the ALST recipe on Qwen3-1.7B 32K in the same call.
#   bash bench/gpu_calls/2026-12-06_s22_call5.sh OUT_DIR
set -u
OUT=$1
. "$(dirname "$0")/build_gpu.sh"
build_gpu $OUT seqpar test_cuda
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
run_tests 150 'CudaTrain.*'
KEEP="--activation-checkpointing --checkpoint-keep-attention --tiled-loss-tokens 8192"
run_bounded q3_32k 45 $B/seqpar bench train --preset qwen3-1.7b --seq-lens 32768 --steps 3 $KEEP --checkpoint-placement auto --profile
grep -E "^linear_forward [0-9]+x1[0-9]{5}x|^matmul 1[0-9]{5}x|^profile" $OUT/q3_32k.log
run_bounded q25_32k 45 $B/seqpar bench train --preset qwen2.5-1.5b --seq-lens 32768 --steps 3 $KEEP --checkpoint-placement auto
run_bounded l1b_64k 45 $B/seqpar bench train --preset llama-3.2-1b --seq-lens 65536 --steps 3 $KEEP
peer_env $OUT
run_bounded q3_32k_alst 100 python3 bench/peers/alst_train_step.py --preset qwen3-1.7b --seq-lens 32768 --steps 3 --torch-adam
echo "done $SECONDS s"
