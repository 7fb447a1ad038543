#!/bin/bash
# For the next GPU call (written in the twenty-third session, not run): a share of the sm_90 kernels' softmax
# exponentials on the FMA pipe (attention/cuda/exp2_poly.h, FlashAttention-4's software exp2) instead of
# MUFU.EX2, which ncu found under 20% of the D = 64 forward's warp samples (call 8); and the backward's dQ writer
# (two tiles, bulk tensor reductions: 3-8% at D = 128 in call 9) at D = 64 too. Four builds: the default (MUFU
# only, vector atomics at D = 64), SEQPAR_SM90_{FWD,BWD}_POLY_EXP2_OF_4 = 1 and 2 (of every 4 8-column blocks),
# and SEQPAR_SM90_BWD_DQ_WRITER_D64=1. The attention tests under the last two, then fwd and fwd_bwd of each
# build beside cuDNN, D = 64 and 128. About 450 s.
#   bash bench/gpu_calls/2026-12-07_s23_poly_exp2.sh OUT_DIR
set -u
OUT=$1
. "$(dirname "$0")/build_gpu.sh"
build_gpu $OUT seqpar
flags() {
  case $1 in poly1) echo "-DSEQPAR_SM90_FWD_POLY_EXP2_OF_4=1 -DSEQPAR_SM90_BWD_POLY_EXP2_OF_4=1" ;;
    poly2) echo "-DSEQPAR_SM90_FWD_POLY_EXP2_OF_4=2 -DSEQPAR_SM90_BWD_POLY_EXP2_OF_4=2" ;;
    dqw64) echo "-DSEQPAR_SM90_BWD_DQ_WRITER_D64=1" ;; esac
}
for v in poly1 poly2 dqw64; do
  build_other $v . "$(flags $v)" seqpar $([ $v != poly1 ] && echo test_cuda)
done
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for v in poly2 dqw64; do
  timeout 100 build-$v/test_cuda --gtest_filter='CudaAttention*:CudnnAttention*:CudaSpAttention*' > $OUT/tests_$v.log 2>&1
  echo "tests $v rc=$?: $(grep -E '^\[  (PASSED|FAILED) ' $OUT/tests_$v.log | tr '\n' ' ')"
  grep -E "FAILED|Failure" $OUT/tests_$v.log | head -5
done
# H / Hkv / D / passes: Llama-3.2-1B's and -3B's heads, then Qwen2.5-1.5B's (GQA 6: cuDNN's backward computes
# dK and dV per query head and sums them afterwards, seqpar's per KV head) and Qwen3-1.7B's, forward+backward only.
for shape in 32:8:64:fwd,fwd_bwd 32:8:128:fwd,fwd_bwd 12:2:128:fwd_bwd 16:8:128:fwd_bwd; do
  IFS=: read h kv d passes <<< "$shape"
  for pass in ${passes//,/ }; do
    for bin in cudnn $B build-poly1 build-poly2 build-dqw64; do
      [ $bin = build-dqw64 ] && { [ $d = 64 ] && [ $pass = fwd_bwd ] || continue; }
      case $bin in cudnn) cmd="$B/seqpar bench attention --backend cudnn" ;; *) cmd="$bin/seqpar bench attention --backend flash" ;; esac
      $cmd --seq-lens 16384,65536 --passes $pass --heads $h --kv-heads $kv --head-dims $d --warmup 2 --iters 5 2>&1 |
        grep -o '"S": *[0-9]*\|"ms": *[0-9.]*\|"tflops": *[0-9.]*' | tr '\n' ' ' | sed "s|^|H=$h/$kv D=$d $pass $bin: |"; echo
    done
  done
done
echo "done $SECONDS s"
