#!/bin/bash
# The short form of 2026-12-06_s31_dq_first.sh for a call with little device time left: one build of this tree with
# both patches applied in place (dq_first, then early_dv), its attention tests, forward+backward at D = 128 / 64
# beside cuDNN (same binary), and Qwen3-1.7B 32K steps with that binary under `sdpa` (auto: cuDNN's backward at
# D = 128, the patches unused there) and `flash_attention_3` (the patched backward), alternating.
#   bash bench/gpu_calls/2026-12-06_s31_dq_first_min.sh OUT_DIR   (~260 s; carry [".devtmp/utf8proc"])
# Its build can be made here instead (~100 s less; carry [".devtmp"] then): tools/prebuild_gpu.sh gpu
#   bench/gpu_calls/2026-12-06_s31_dq_first.patch bench/gpu_calls/2026-12-06_s31_early_dv.patch
set -u
OUT=$1
. "$(dirname "$0")/build_gpu.sh"
for p in dq_first early_dv; do patch -p1 < bench/gpu_calls/2026-12-06_s31_$p.patch > /dev/null || { echo "patch $p failed"; exit 1; }; done
build_gpu $OUT seqpar test_cuda
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
test_build gpu || exit 1
for D in 128 64; do attn_rounds fwd_bwd $D; done
KEEP="--activation-checkpointing --checkpoint-keep-attention --tiled-loss-tokens 8192 --checkpoint-placement auto"
END=${END:-270}
for r in 1 2; do
  for impl in sdpa flash_attention_3; do
    run_bounded q3_${impl}_$r 40 $B/seqpar bench train --preset qwen3-1.7b --seq-lens 32768 --steps 3 $KEEP \
      --attn-implementation $impl
  done
done
echo "done $SECONDS s"
