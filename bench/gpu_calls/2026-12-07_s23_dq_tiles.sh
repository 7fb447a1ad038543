#!/bin/bash
# Twenty-third session: the sm_90 backward's dQ in two shared tiles with bulk tensor reductions (D = 128). ncu's
# source page (call 8) put 23% of the backward's warp samples at the consumers' wait for the writer warp to have
# read the single dQ tile. Tests, then fwd_bwd against the previous commit's binary (built from
# .devtmp/base_s23, a `git archive` of it) and cuDNN in the same call.
#   bash bench/gpu_calls/2026-12-07_s23_dq_tiles.sh OUT_DIR
set -u
OUT=$1
. "$(dirname "$0")/build_gpu.sh"
build_gpu $OUT seqpar test_cuda
build_other base .devtmp/base_s23 "" seqpar  # (.devtmp/base_s23: removed once this call had run)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
run_tests 150 'CudaAttention*:CudnnAttention*:CudaSpAttention*'
A="--seq-lens 16384,65536 --passes fwd_bwd --warmup 2 --iters 5"
for hk in 32:8:128 24:8:128 16:8:128 32:32:128; do
  IFS=: read h kv d <<< "$hk"
  for be in cudnn base new; do
    case $be in new) $B/seqpar bench attention --backend flash $A --heads $h --kv-heads $kv --head-dims $d ;;
      base) build-base/seqpar bench attention --backend flash $A --heads $h --kv-heads $kv --head-dims $d ;;
      *) $B/seqpar bench attention --backend cudnn $A --heads $h --kv-heads $kv --head-dims $d ;; esac 2>&1 |
      grep -o '"S": *[0-9]*\|"ms": *[0-9.]*\|"tflops": *[0-9.]*' | tr '\n' ' ' | sed "s/^/H=$h Hkv=$kv D=$d $be: /"; echo
  done
done
for bin in build-base/seqpar $B/seqpar; do
  timeout 60 ncu --clock-control none --section SpeedOfLight --section SchedulerStats -k regex:bwd_sm90 -c 1 \
    $bin bench attention --backend flash --seq-lens 16384 --head-dims 128 --heads 32 --kv-heads 8 \
    --passes fwd_bwd --warmup 0 --iters 1 > $OUT/ncu.log 2>&1
  echo "== ncu $bin D=128: $(grep -E 'Duration|DRAM Throughput|Issue Slots Busy|No Eligible' $OUT/ncu.log | tr -s ' ' | tr '\n' ';')"
done
echo "done $SECONDS s"
