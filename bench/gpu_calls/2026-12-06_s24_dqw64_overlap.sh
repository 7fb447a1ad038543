#!/bin/bash
# Twenty-fourth session, call 3: (1) the sm_90 backward's dQ writer at D = 64 as the kernel's only dQ path
# (the vector atomics and the exp2 shares removed after call 2) under the attention and training tests, and
# its forward+backward beside cuDNN at D = 64; (2) the overlapped device AdamW now that timed steps wait for
# their own stream only (fc923a5): Qwen3-1.7B at 32K / 16K against the commit before the overlap
# (.devtmp/base_adamw, a `git archive` of a3e92db~1), twice each, alternating. About 300 s.
#   bash bench/gpu_calls/2026-12-06_s24_dqw64_overlap.sh OUT_DIR
set -u
OUT=$1
. "$(dirname "$0")/build_gpu.sh"
build_gpu $OUT seqpar test_cuda
build_other base .devtmp/base_adamw "" seqpar
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
run_tests 200 'CudaAttention*:CudnnAttention*:CudaSpAttention*:CudaTrain.*'
for backend in cudnn flash; do
  $B/seqpar bench attention --backend $backend --seq-lens 16384,65536 --passes fwd_bwd --heads 32 --kv-heads 8 \
    --head-dims 64 --warmup 2 --iters 5 2>&1 |
    grep -o '"S": *[0-9]*\|"ms": *[0-9.]*\|"tflops": *[0-9.]*' | tr '\n' ' ' | sed "s|^|D=64 fwd_bwd $backend: |"; echo
done
KEEP="--activation-checkpointing --checkpoint-keep-attention --tiled-loss-tokens 8192 --checkpoint-placement auto"
for bin in build-base $B build-base $B; do
  tag=$([ $bin = build-base ] && echo base || echo new)
  run_bounded q3_$tag 45 $bin/seqpar bench train --preset qwen3-1.7b --seq-lens 32768 --steps 5 $KEEP
  run_bounded q3_16k_$tag 30 $bin/seqpar bench train --preset qwen3-1.7b --seq-lens 16384 --steps 5 $KEEP
done
echo "done $SECONDS s"
