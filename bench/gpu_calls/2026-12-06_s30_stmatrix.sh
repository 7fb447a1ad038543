#!/bin/bash
# For the next session (written in the thirtieth without a GPU): the sm_90 backward's dS^T stores as stmatrix.x4.
# ncu on the H200 (thirtieth session, 16K, H 32, D = 128) puts the backward's warps at 1.15 MIO-throttle stalls per
# issued instruction against cuDNN's 0.10, and 1.00 short-scoreboard stalls against 0.65. Per step and thread the
# consumers write dS^T with 16 scalar 32-bit shared stores (32 at D = 64); stmatrix.x4 writes four 8x8 16-bit
# matrices a warp from exactly the accumulator fragment's layout, so 4 instructions (8 at D = 64) do it. Static SASS:
# 160 STS -> 64 STS + 24 STSM over the four instantiations, no spills.
# A second build, `lanes` (2026-12-06_s30_stmatrix_lanes.patch: the stmatrix change plus this), also has the pre-pass
# store lse2 / delta in the lanes' order within each 16 query rows, so that each lane reads its rows' values as
# float4 instead of float2: 16 LDS.64 -> 8 LDS.128 a step at D = 128 (static SASS: 96 -> 48 LDS over the four
# instantiations, no spills). Both patches change the default kernel, so they stay off main until the tests pass on
# a GPU and they are measured; the script applies them to copies of the tree (no setup needed).
# 1. `lanes` under the attention tests (it holds both changes); nothing is timed if they fail; 2. forward+backward,
# D = 128 and 64, H 32 (two alternating rounds) and 16, Hkv 8, 16K / 64K, beside cuDNN and the default; 3. ncu's
# stall ratios of the three backwards at 16K, H 32, D = 128.
#   bash bench/gpu_calls/2026-12-06_s30_stmatrix.sh OUT_DIR   (~450 s, carry [".devtmp/utf8proc"])
# If one wins: `git apply` its patch on main (each applies to this commit's tree), and a NOTES entry.
set -u
OUT=$1
. "$(dirname "$0")/build_gpu.sh"
for v in stm:ds lanes:lanes; do
  rm -rf /tmp/${v%%:*} && mkdir -p /tmp/${v%%:*} && tar --exclude='./build*' --exclude=./.devtmp --exclude=./.git -cf - . | tar -xf - -C /tmp/${v%%:*} &&
    (cd /tmp/${v%%:*} && patch -p1 < bench/gpu_calls/2026-12-06_s30_stmatrix_${v##*:}.patch > /dev/null) ||
    { echo "patch $v failed"; exit 1; }
done
build_gpu $OUT seqpar
build_other stm /tmp/stm "" seqpar &
build_other lanes /tmp/lanes "" seqpar test_cuda
wait
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
test_build lanes || exit 1
for D in 128 64; do
  attn_ms cudnn $B cudnn $D 32 fwd_bwd
  for bin in $B build-stm build-lanes $B build-stm build-lanes; do attn_ms $bin $bin flash $D 32 fwd_bwd; done
  attn_ms cudnn $B cudnn $D 16 fwd_bwd
  for bin in $B build-stm build-lanes; do attn_ms $bin $bin flash $D 16 fwd_bwd; done
done
A="--seq-lens 16384 --heads 32 --kv-heads 8 --passes fwd_bwd --head-dims 128 --warmup 0 --iters 1"
M="smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,gpu__time_duration.sum"
for bin in $B build-stm build-lanes; do
  timeout 100 ncu --clock-control none --metrics "$M" -k regex:bwd_sm90 -c 1 $bin/seqpar bench attention --backend flash \
    $A > $OUT/ncu_$(basename $bin).log 2>&1
  echo "#### $bin rc=$?"; grep -E "stalled|tensor|duration" $OUT/ncu_$(basename $bin).log
done
echo "done $SECONDS s"
