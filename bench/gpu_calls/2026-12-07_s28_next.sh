#!/bin/bash
# For the next session (written in the twenty-eighth without a GPU). One measurement build `var` with two switches
# that touch different kernels (no spills; the default build's SASS is unchanged):
#   -DSEQPAR_SM90_FWD_ACCS=4: the sm_90 forward's row maximum and row sum in 4 independent partials instead of one
#     chain of 16 FMNMX and one of 32 FADD per row (the forward's timing says what it does);
#   -DSEQPAR_SM90_BWD_KT_MAJOR=1: the sm_90 backward's grid (key tile, KV head) instead of (KV head, key tile), so the
#     blocks running at once share one KV group's Q / dO / dQ rows (the backward's timing = fwd_bwd - fwd says what
#     it does).
# 1. var under the attention tests while nothing else builds (the op harness's attention case takes ~95 s, more under
#    a build's load); not timed if they fail; 2. forward, and forward+backward, D = 64 and 128, H 32 (two alternating
#    rounds), and D = 128 forward+backward at H 16, Hkv 8, 16K / 64K, beside cuDNN and the default; 3. ncu launch statistics and warp states of the
#    D = 128 backward beside cuDNN's.
#   bash bench/gpu_calls/2026-12-07_s28_next.sh OUT_DIR   (~500 s)
set -u
OUT=$1
. "$(dirname "$0")/build_gpu.sh"
build_gpu $OUT seqpar
build_other var . "-DSEQPAR_SM90_FWD_ACCS=4 -DSEQPAR_SM90_BWD_KT_MAJOR=1" seqpar test_cuda
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
V=""
test_build var && V=build-var
for P in fwd fwd_bwd; do
  for D in 64 128; do
    attn_ms cudnn $B cudnn $D 32 $P
    for bin in $B $V $B $V; do attn_ms $bin $bin flash $D 32 $P; done
  done
done
attn_ms cudnn $B cudnn 128 16 fwd_bwd
for bin in $B $V; do attn_ms $bin $bin flash 128 16 fwd_bwd; done
echo "bench done $SECONDS s"
A="--seq-lens 16384 --heads 32 --kv-heads 8 --passes fwd_bwd --head-dims 128 --warmup 0 --iters 1"
for k in "flash regex:bwd_sm90" "cudnn regex:bprop"; do
  set -- $k
  timeout 90 ncu --clock-control none --section LaunchStats --section Occupancy --section WarpStateStats -k "$2" -c 1 \
    $B/seqpar bench attention --backend $1 $A > $OUT/ncu_bwd_$1.log 2>&1
  echo "#### bwd $1 rc=$?"
  grep -E "Block Size|Grid Size|Registers Per|Dynamic Shared|Static Shared|Waves|Stall|Warp Cycles" \
    $OUT/ncu_bwd_$1.log | head -16
done
echo "done $SECONDS s"
