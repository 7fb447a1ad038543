#!/bin/bash
# Twenty-fifth session, call 3 cut to the device time left (~300 s): the landed state under the attention tests,
# then the 3-stage measurement build of the D = 128 backward (-DSEQPAR_SM90_BWD_STAGES=3) beside it and cuDNN,
# `bench attention --passes fwd_bwd`, H 32 / Hkv 8, 16K and 64K, alternating. (2026-12-06_s25_call3.sh is the
# whole call, with the diagnostic build without dQ reductions.)
#   bash bench/gpu_calls/2026-12-06_s25_call3s.sh OUT_DIR
set -u
OUT=$1
. "$(dirname "$0")/build_gpu.sh"
build_gpu $OUT seqpar test_cuda
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
run_tests 120 'CudaAttention*:CudnnAttention*:CudaSpAttention*:CudaOpHarness.*'
build_other s3 . "-DSEQPAR_SM90_BWD_STAGES=3" seqpar
for bin in cudnn $B build-s3 $B build-s3; do
  case $bin in cudnn) cmd="$B/seqpar bench attention --backend cudnn" ;; *) cmd="$bin/seqpar bench attention --backend flash" ;; esac
  $cmd --seq-lens 16384,65536 --passes fwd_bwd --heads 32 --kv-heads 8 --head-dims 128 --warmup 2 --iters 5 2>&1 |
    grep -o '"S": *[0-9]*\|"ms": *[0-9.]*' | tr '\n' ' ' | sed "s|^|D=128 H=32 fwd_bwd $bin: |"; echo
done
echo "done $SECONDS s"
