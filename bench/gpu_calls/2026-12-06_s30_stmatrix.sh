#!/bin/bash
# For the next session (written in the thirtieth without a GPU): fewer shared-memory instructions in the sm_90
# backward. ncu on the H200 (thirtieth session, 16K, H 32, D = 128) puts its warps at 1.15 MIO-throttle stalls per
# issued instruction against cuDNN's 0.10, and 1.00 short-scoreboard stalls against 0.65. Three builds, each a patch
# on this tree that holds the one before it (they change the default kernel, so they stay off main until the tests
# pass on a GPU and they are measured; the script applies them to copies of the tree, no setup needed):
# - stm   (2026-12-06_s30_stmatrix_ds.patch): dS^T to shared memory as stmatrix.x4, 4 instructions a step instead of
#         16 scalar 32-bit stores (8 / 32 at D = 64);
# - lanes (_lanes.patch): + the pre-pass stores lse2 / delta in the lanes' order within each 16 query rows
#         (stats_lane_slot), so each lane reads its rows' values as float4: 8 LDS.128 a step instead of 16 LDS.64;
# - dq    (_dq.patch): + dQ to its shared tile as stmatrix.x4 of f32 pairs, 8 a step instead of 16 STS.64; dq_acc
#         then holds each 8 columns in the lanes' order, which dq's finish (launch_dq_finish lane_order) undoes.
# Static SASS over the four instantiations (bf16 / f16, D = 64 / 128), no spills in any: default 160 STS, 96 LDS,
# 14128 instructions; stm 64 STS + 24 STSM, 14016; lanes 48 LDS, 13968; dq 0 STS + 56 STSM, 13920.
# 1. `dq` under the attention tests (it holds all three), else `lanes`; a build is timed only if it (or one above it)
# passed; 2. forward+backward, D = 128 and 64, H 32 (two alternating rounds) and 16, Hkv 8, 16K / 64K, beside cuDNN
# and the default; 3. ncu's MIO / short-scoreboard / barrier stalls of each backward at 16K, H 32, D = 128.
#   bash bench/gpu_calls/2026-12-06_s30_stmatrix.sh OUT_DIR   (~450 s, carry [".devtmp/utf8proc"])
# If one wins: `git apply` its patch on main (each applies to this commit's tree), and a NOTES entry.
set -u
OUT=$1
. "$(dirname "$0")/build_gpu.sh"
for v in stm:ds lanes:lanes dq:dq; do patched_copy /tmp/${v%%:*} bench/gpu_calls/2026-12-06_s30_stmatrix_${v##*:}.patch; done
build_gpu $OUT seqpar
build_other stm /tmp/stm "" seqpar &
build_other lanes /tmp/lanes "" seqpar test_cuda &
build_other dq /tmp/dq "" seqpar test_cuda
wait
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
V="build-stm build-lanes build-dq"
test_build dq || { V="build-stm build-lanes"; test_build lanes || exit 1; }
for D in 128 64; do attn_rounds fwd_bwd $D $V; done
bwd_stalls 100 $B $V
echo "done $SECONDS s"
