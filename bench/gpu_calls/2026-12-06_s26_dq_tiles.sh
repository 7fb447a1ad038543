#!/bin/bash
# Twenty-sixth session, call 3: the sm_90 backward's dQ added with one contiguous bulk reduction per step
# (cp.reduce.async.bulk .add.f32 of the whole 32 KB shared tile into dq_acc, which now holds the tiles in the
# shared tile's order, FlashAttention-3's layout idea) instead of D / 32 bulk tensor reductions of 32-column boxes
# whose 128-byte rows lie H * D * 4 bytes apart in a (Tq, H, D) dq_acc. Call 2 measured the dQ reductions at
# 18% / 10% of the D = 128 forward+backward (16K / 64K) by leaving them out.
# Tests of the new default first; then `bench attention --passes fwd_bwd` at 16K / 64K beside the commit before
# (.devtmp/base_tiles, a `git archive` of 0414e8c) and cuDNN, alternating. About 330 s.
#   bash bench/gpu_calls/2026-12-06_s26_dq_tiles.sh OUT_DIR
set -u
OUT=$1
. "$(dirname "$0")/build_gpu.sh"
build_gpu $OUT seqpar test_cuda
build_other base .devtmp/base_tiles "" seqpar
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
run_tests 200 'CudaAttention*:CudnnAttention*:CudaSpAttention*:CudaOpHarness.*'
for dh in 128:32 128:16 64:32; do
  IFS=: read d h <<< "$dh"
  attn_ms cudnn $B cudnn $d $h fwd_bwd
  for bin in build-base $B build-base $B; do attn_ms $bin $bin flash $d $h fwd_bwd; done
done
echo "done $SECONDS s"
