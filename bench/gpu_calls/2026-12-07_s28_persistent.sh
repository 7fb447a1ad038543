#!/bin/bash
# For the next session (written in the twenty-eighth without a GPU): the persistent sm_90 forward again, now with its
# items dealt in a snake over the heaviest-first order of all (query tile, head) items. The twenty-sixth session's
# persistent build dealt items with a stride of the grid, which leaves the blocks' causal work 5.5% (D 128) to 14%
# (D 64) apart at 16K in a model with equal cost per key tile; the snake keeps them within 0.3%. The D = 64 forward
# is 0.91x cuDNN at 16K against 0.97x at 64K: one block per SM does its prologue (Q, the first K, S_0 alone) and its
# epilogue unoverlapped, ~3 of ~43 tiles a block at 16K; cuDNN's forward is persistent.
# The code is a patch (2026-12-07_s28_persistent_fwd.patch, -DSEQPAR_SM90_FWD_PERSISTENT=1): on main it changed the
# default build's scheduling a little, so it stays off main until it wins. Before the call, on the dev machine:
#   rm -rf .devtmp/pers && mkdir -p .devtmp/pers && git archive HEAD | tar -x -C .devtmp/pers &&
#   (cd .devtmp/pers && patch -p1 < ../../bench/gpu_calls/2026-12-07_s28_persistent_fwd.patch)
# The same build also carries -DSEQPAR_SM90_BWD_EARLY_DV=1 (the D = 128 backward issuing dV += P^T dO before it
# waits for dP^T, so dV runs under the dS arithmetic; on main, default SASS unchanged): the forward's timing says what
# persistence does, forward+backward minus forward what the early dV does.
# 1. pers under the attention tests (alone on the machine); not timed if they fail; 2. forward, D = 64 and 128, H 32
# (two alternating rounds) and 16, Hkv 8, 16K / 64K, beside cuDNN and the default; D = 128 forward+backward.
#   bash bench/gpu_calls/2026-12-07_s28_persistent.sh OUT_DIR   (~470 s, carry [".devtmp"])
set -u
OUT=$1
. "$(dirname "$0")/build_gpu.sh"
[ -f .devtmp/pers/src/attention/cuda/attn_fwd_sm90.cuh ] || { echo "no .devtmp/pers (see the header)"; exit 1; }
build_gpu $OUT seqpar
build_other pers .devtmp/pers "-DSEQPAR_SM90_FWD_PERSISTENT=1 -DSEQPAR_SM90_BWD_EARLY_DV=1" seqpar test_cuda
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
test_build pers || exit 1
for D in 64 128; do
  attn_rounds fwd $D build-pers
done
# The backward's switch: forward+backward at D = 128 (the backward = forward+backward - forward of the same build).
attn_rounds fwd_bwd 128 build-pers
echo "done $SECONDS s"
