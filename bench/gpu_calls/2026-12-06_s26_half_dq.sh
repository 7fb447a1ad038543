#!/bin/bash
# Twenty-sixth session, call 4: would halving the sm_90 backward's dQ reductions pay? (A cluster of two key-tile
# CTAs adding their dQ tiles in distributed shared memory before one reduction would halve the volume.) Two
# diagnostic builds, not kernels (dq is wrong), from copies of the tree edited by sed: `half`, the writer reducing
# the dQ tile of every other step only; `nodq`, no reductions at all (call 2's). Beside the default and cuDNN,
# `bench attention --passes fwd_bwd --head-dims 128` at 16K / 64K, H 32 / Hkv 8 (PART=full: H 16 and nodq too).
# About 150 s (PART=full 280 s).
#   bash bench/gpu_calls/2026-12-06_s26_half_dq.sh OUT_DIR
set -u
OUT=$1
. "$(dirname "$0")/build_gpu.sh"
build_gpu $OUT seqpar
V="half"; [ "${PART:-}" = full ] && V="half nodq"
for v in $V; do
  rm -rf /tmp/$v && mkdir -p /tmp/$v && cp -r CMakeLists.txt src /tmp/$v/
done
sed -i 's|for (int c = 0; c < D / 32; ++c)$|for (int c = 0; c < ((it \& 1) ? 0 : D / 32); ++c)|' /tmp/half/src/attention/cuda/attn_bwd_sm90.cuh
[ -d /tmp/nodq ] && sed -i 's|tma_reduce_add_3d(&tm_dq|if (false) tma_reduce_add_3d(\&tm_dq|' /tmp/nodq/src/attention/cuda/attn_bwd_sm90.cuh
echo "edits: half $(grep -c '(it & 1) ? 0 : D / 32' /tmp/half/src/attention/cuda/attn_bwd_sm90.cuh)"
for v in $V; do build_other $v /tmp/$v "" seqpar; done
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
attn_ms cudnn $B cudnn 128 32 fwd_bwd
N=""; [ "${PART:-}" = full ] && N=build-nodq
for bin in $B build-half $N $B build-half $N; do attn_ms $bin $bin flash 128 32 fwd_bwd; done
if [ "${PART:-}" = full ]; then
  attn_ms cudnn $B cudnn 128 16 fwd_bwd
  for bin in $B build-half $B build-half; do attn_ms $bin $bin flash 128 16 fwd_bwd; done
fi
echo "done $SECONDS s"
