#!/bin/bash
# Thirty-second session: the shortest call that still decides 2026-12-06_s31_dq_first.sh's question (for ~200 s of
# device time): the prebuilt default, a and d (tools/prebuild_gpu.sh, as named in that script's header), forward +
# backward at D = 128 (attn_rounds: cuDNN, the default's and each build's own kernel, two rounds at H 32, one at H 16,
# Hkv 8, 16K / 64K) first, then both builds' attention tests at once until the call's end (a build lands only with
# its tests passed).
#   bash bench/gpu_calls/2026-12-07_s32_dq_first_short.sh OUT_DIR   (carry [".devtmp"])
set -u
OUT=$1
. "$(dirname "$0")/build_gpu.sh"
P=bench/gpu_calls/2026-12-06_s31
build_variants $OUT a=${P}_dq_first.patch d=${P}_dq_first.patch+${P}_early_dv.patch
attn_rounds fwd_bwd 128 build-a build-d
echo "timed $SECONDS s"
test_builds a d
echo "done $SECONDS s"
