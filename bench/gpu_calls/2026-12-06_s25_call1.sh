#!/bin/bash
# Twenty-fifth session, call 1: (a) the forward kernels back on their 2-D grid (the 1-D grid in L2 sections measured
# level with it: reverted) and the sm_90 forward's conditional rescaling at D = 128 only, under the attention tests;
# (b) the sm_90 forward beside cuDNN, D = 64 and 128, 16K and 64K, H 32 / Hkv 8; (c) ncu's warp-state sampling per
# SASS instruction of the backward at D = 128 and the forward at D = 64 (16K, H 32 / Hkv 8, causal), as in
# 2026-12-07_s23_ncu_source.sh. About 300 s.
#   bash bench/gpu_calls/2026-12-06_s25_call1.sh OUT_DIR
set -u
OUT=$1
. "$(dirname "$0")/build_gpu.sh"
build_gpu $OUT seqpar test_cuda
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
run_tests 200 'CudaAttention*:CudnnAttention*:CudaSpAttention*:CudaOpHarness.*'
for d in 64 128; do
  for be in cudnn flash cudnn flash; do
    $B/seqpar bench attention --backend $be --seq-lens 16384,65536 --passes fwd --heads 32 --kv-heads 8 --head-dims $d \
      --warmup 2 --iters 5 2>&1 | grep -o '"S": *[0-9]*\|"ms": *[0-9.]*\|"tflops": *[0-9.]*' | tr '\n' ' ' |
      sed "s|^|D=$d fwd $be: |"; echo
  done
done
NCU_KERNELS="bwd:128 fwd:64" bash "$(dirname "$0")/2026-12-07_s23_ncu_source.sh" $OUT | grep -v "^build ok\|^NVIDIA"
