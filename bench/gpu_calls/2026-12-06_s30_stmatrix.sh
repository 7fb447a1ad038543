#!/bin/bash
# For the next session (written in the thirtieth without a GPU): the sm_90 backward's dS^T stores as stmatrix.x4.
# ncu on the H200 (thirtieth session, 16K, H 32, D = 128) puts the backward's warps at 1.15 MIO-throttle stalls per
# issued instruction against cuDNN's 0.10, and 1.00 short-scoreboard stalls against 0.65. Per step and thread the
# consumers write dS^T with 16 scalar 32-bit shared stores (32 at D = 64); stmatrix.x4 writes four 8x8 16-bit
# matrices a warp from exactly the accumulator fragment's layout, so 4 instructions (8 at D = 64) do it. Static SASS:
# 160 STS -> 64 STS + 24 STSM over the four instantiations, no spills.
# The patch (2026-12-06_s30_stmatrix_ds.patch) changes the default kernel, so it stays off main until the tests pass
# on a GPU and it is measured; the script applies it to a copy of the tree (no setup needed).
# 1. the patched build under the attention tests (alone on the machine); not timed if they fail; 2. forward+backward,
# D = 128 and 64, H 32 (two alternating rounds) and 16, Hkv 8, 16K / 64K, beside cuDNN and the default; 3. ncu's
# stall ratios of both backwards at 16K, H 32, D = 128.
#   bash bench/gpu_calls/2026-12-06_s30_stmatrix.sh OUT_DIR   (~420 s, carry [".devtmp/utf8proc"])
# If it wins: `git apply bench/gpu_calls/2026-12-06_s30_stmatrix_ds.patch` on main, and a NOTES entry.
set -u
OUT=$1
. "$(dirname "$0")/build_gpu.sh"
rm -rf /tmp/stm && mkdir -p /tmp/stm && tar --exclude='./build*' --exclude=./.devtmp -cf - . | tar -xf - -C /tmp/stm &&
  (cd /tmp/stm && patch -p1 < bench/gpu_calls/2026-12-06_s30_stmatrix_ds.patch > /dev/null) || { echo "patch failed"; exit 1; }
build_gpu $OUT seqpar
build_other stm /tmp/stm "" seqpar test_cuda
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
test_build stm || exit 1
for D in 128 64; do
  attn_ms cudnn $B cudnn $D 32 fwd_bwd
  for bin in $B build-stm $B build-stm; do attn_ms $bin $bin flash $D 32 fwd_bwd; done
  attn_ms cudnn $B cudnn $D 16 fwd_bwd
  for bin in $B build-stm; do attn_ms $bin $bin flash $D 16 fwd_bwd; done
done
A="--seq-lens 16384 --heads 32 --kv-heads 8 --passes fwd_bwd --head-dims 128 --warmup 0 --iters 1"
M="smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,gpu__time_duration.sum"
for bin in $B build-stm; do
  timeout 100 ncu --clock-control none --metrics "$M" -k regex:bwd_sm90 -c 1 $bin/seqpar bench attention --backend flash \
    $A > $OUT/ncu_$(basename $bin).log 2>&1
  echo "#### $bin rc=$?"; grep -E "stalled|tensor|duration" $OUT/ncu_$(basename $bin).log
done
echo "done $SECONDS s"
