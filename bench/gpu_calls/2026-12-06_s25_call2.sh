#!/bin/bash
# Twenty-fifth session, call 2: three changes to the sm_90 kernels against the commit before them (.devtmp/base_walk,
# a `git archive` of 0e8e49e's CMakeLists.txt and src) and cuDNN, alternating: the backward walking each key tile's
# query tiles from the last down (the blocks running at once then read the same Q / dO tiles and add into the same dQ
# rows at about the same time, so the L2 keeps them) and releasing its Q / dO stage before the dQ product's wait;
# boundary tiles that are one run masked from their indices (forward and backward). The attention and training
# tests, then `bench attention --passes fwd_bwd` at D = 128 (H 32 / Hkv 8 and 16 / 8) and D = 64 (32 / 8), 16K and
# 64K; then ncu's source sampling of the new backward at D = 128. About 330 s.
#   bash bench/gpu_calls/2026-12-06_s25_call2.sh OUT_DIR
set -u
OUT=$1
. "$(dirname "$0")/build_gpu.sh"
build_gpu $OUT seqpar test_cuda
build_other base .devtmp/base_walk "" seqpar
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
run_tests 200 'CudaAttention*:CudnnAttention*:CudaSpAttention*:CudaOpHarness.*:CudaTrain.*'
for shape in 128:32:fwd_bwd 128:16:fwd_bwd 64:32:fwd_bwd 64:32:fwd; do
  IFS=: read d h pass <<< "$shape"
  for bin in cudnn build-base $B build-base $B; do
    case $bin in cudnn) cmd="$B/seqpar bench attention --backend cudnn" ;; *) cmd="$bin/seqpar bench attention --backend flash" ;; esac
    $cmd --seq-lens 16384,65536 --passes $pass --heads $h --kv-heads 8 --head-dims $d --warmup 2 --iters 5 2>&1 |
      grep -o '"S": *[0-9]*\|"ms": *[0-9.]*' | tr '\n' ' ' | sed "s|^|D=$d H=$h $pass $bin: |"; echo
  done
done
NCU_KERNELS="bwd:128" bash "$(dirname "$0")/2026-12-07_s23_ncu_source.sh" $OUT | grep -v "^build ok\|^NVIDIA" | head -14
echo "done $SECONDS s"
