#!/bin/bash
# For the next session (written in the twenty-eighth without a GPU), after 2026-12-07_s28_next.sh: the sm_90
# backward split as cuDNN splits it (-DSEQPAR_SM90_BWD_PER_HEAD=1, build `ph`): one block per (key tile, query head)
# instead of per (KV head, key tile) walking the group's heads; dK / dV per query head into f32 scratch [Tk, H, D]
# (2 GB at 64K, H 32, D 128), summed per KV group by a second kernel. No spills; the default build's SASS is
# unchanged. 1. ph under the attention tests (alone on the machine); not timed if they fail; 2. forward+backward,
# D = 64 and 128, H 32 (two alternating rounds) and D = 128 H 16, Hkv 8, 16K / 64K, beside cuDNN and the default.
#   bash bench/gpu_calls/2026-12-07_s28_perhead.sh OUT_DIR   (~420 s)
set -u
OUT=$1
. "$(dirname "$0")/build_gpu.sh"
build_gpu $OUT seqpar
build_other ph . "-DSEQPAR_SM90_BWD_PER_HEAD=1" seqpar test_cuda
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
test_build ph || exit 1
for D in 64 128; do
  attn_ms cudnn $B cudnn $D 32 fwd_bwd
  for bin in $B build-ph $B build-ph; do attn_ms $bin $bin flash $D 32 fwd_bwd; done
done
attn_ms cudnn $B cudnn 128 16 fwd_bwd
for bin in $B build-ph; do attn_ms $bin $bin flash 128 16 fwd_bwd; done
echo "done $SECONDS s"
