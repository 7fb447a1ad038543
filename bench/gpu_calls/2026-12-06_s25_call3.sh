#!/bin/bash
# Twenty-fifth session, call 3: the landed state (the backward's walk back upwards; its stage released before the
# dQ wait; boundary tiles that are one run masked from their indices) under the attention tests, and
# a measurement build of the D = 128 backward with a 3-stage Q / dO ring and one shared dQ tile
# (-DSEQPAR_SM90_BWD_STAGES=3) under the attention tests; then `bench attention --passes fwd_bwd`, cuDNN, the
# default and the 3-stage build alternating, D = 128 (H 32 / Hkv 8 and 16 / 8), and D = 64 forward and
# forward+backward beside cuDNN, 16K and 64K; then ncu's source sampling of the 3-stage backward. About 380 s (ncu only when started before NCU_BEFORE seconds, default 470).
#   bash bench/gpu_calls/2026-12-06_s25_call3.sh OUT_DIR
set -u
OUT=$1
. "$(dirname "$0")/build_gpu.sh"
build_gpu $OUT seqpar test_cuda
build_other s3 . "-DSEQPAR_SM90_BWD_STAGES=3" seqpar test_cuda
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
run_tests 200 'CudaAttention*:CudnnAttention*:CudaSpAttention*:CudaOpHarness.*'
timeout 150 build-s3/test_cuda --gtest_filter='CudaAttention*:CudaOpHarness.*' > $OUT/tests_s3.log 2>&1
echo "tests s3 rc=$?: $(grep -E '^\[  (PASSED|FAILED) ' $OUT/tests_s3.log | tr '\n' ' ')"
grep -E "FAILED|Failure" $OUT/tests_s3.log | head -5
bench() {  # LABEL BIN BACKEND D H PASS
  $2/seqpar bench attention --backend $3 --seq-lens 16384,65536 --passes $6 --heads $5 --kv-heads 8 --head-dims $4 \
    --warmup 2 --iters 5 2>&1 | grep -o '"S": *[0-9]*\|"ms": *[0-9.]*' | tr '\n' ' ' | sed "s|^|D=$4 H=$5 $6 $1: |"; echo
}
for h in 32 16; do
  bench cudnn $B cudnn 128 $h fwd_bwd
  for bin in $B build-s3 $B build-s3; do bench $bin $bin flash 128 $h fwd_bwd; done
done
for pass in fwd fwd_bwd; do
  for be in cudnn flash cudnn flash; do bench $be $B $be 64 32 $pass; done
done
[ $SECONDS -lt ${NCU_BEFORE:-470} ] && NCU_BIN=build-s3 NCU_KERNELS="bwd:128" bash "$(dirname "$0")/2026-12-07_s23_ncu_source.sh" $OUT |
  grep -v "^build ok\|^NVIDIA" | head -8
echo "done $SECONDS s"
