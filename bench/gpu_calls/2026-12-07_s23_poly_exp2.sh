#!/bin/bash
# For the next GPU call (written in the twenty-third session, not run): a share of the sm_90 kernels' softmax
# exponentials on the FMA pipe (attention/cuda/exp2_poly.h, FlashAttention-4's software exp2) instead of
# MUFU.EX2, which ncu found under 20% of the D = 64 forward's warp samples (call 8). Three builds: the default
# (MUFU only) and SEQPAR_SM90_{FWD,BWD}_POLY_EXP2_OF_4 = 1 and 2 (of every 4 8-column blocks). The attention
# tests under share 2, then fwd and fwd_bwd of each build beside cuDNN, D = 64 and 128. About 330 s.
#   bash bench/gpu_calls/2026-12-07_s23_poly_exp2.sh OUT_DIR
set -u
OUT=$1
. "$(dirname "$0")/build_gpu.sh"
build_gpu $OUT seqpar
u=$PWD/.devtmp/utf8proc
for k in 1 2; do
  (cmake -S . -B build-poly$k -G Ninja -DSEQPAR_CUDA=ON -DSEQPAR_DIAG=OFF -DCMAKE_BUILD_TYPE=Release \
    "-DCMAKE_CUDA_FLAGS=-DSEQPAR_SM90_FWD_POLY_EXP2_OF_4=$k -DSEQPAR_SM90_BWD_POLY_EXP2_OF_4=$k" \
    -DUTF8PROC_INCLUDE_DIR=$u -DUTF8PROC_LIBRARY=$u/libutf8proc.a &&
    cmake --build build-poly$k -j 16 --target seqpar $([ $k = 2 ] && echo test_cuda)) > $OUT/build_poly$k.log 2>&1 &&
    echo "poly$k build ok $SECONDS s" || { echo "POLY$k BUILD FAILED"; grep error $OUT/build_poly$k.log | head; }
done
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 120 build-poly2/test_cuda --gtest_filter='CudaAttention*:CudnnAttention*:CudaSpAttention*' > $OUT/tests.log 2>&1
echo "tests (share 2) rc=$?: $(grep -E '^\[  (PASSED|FAILED) ' $OUT/tests.log | tr '\n' ' ')"; grep -E "FAILED|Failure" $OUT/tests.log | head -5
for d in 64 128; do
  for pass in fwd fwd_bwd; do
    for bin in cudnn $B build-poly1 build-poly2; do
      case $bin in cudnn) cmd="$B/seqpar bench attention --backend cudnn" ;; *) cmd="$bin/seqpar bench attention --backend flash" ;; esac
      $cmd --seq-lens 16384,65536 --passes $pass --heads 32 --kv-heads 8 --head-dims $d --warmup 2 --iters 5 2>&1 |
        grep -o '"S": *[0-9]*\|"ms": *[0-9.]*\|"tflops": *[0-9.]*' | tr '\n' ' ' | sed "s|^|D=$d $pass $bin: |"; echo
    done
  done
done
echo "done $SECONDS s"
