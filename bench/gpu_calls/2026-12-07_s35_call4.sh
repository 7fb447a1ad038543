#!/bin/bash
# Thirty-fifth session, call 4: two changes the landed backward's ncu (call 3) points at. `st`
# (2026-12-07_s35_early_stats.patch): at D = 128 lse2 and delta are read from shared memory before the product they
# meet is waited for (9% of the samples sat on the first FFMA after the S^T wait, short scoreboard). `sf` (+
# 2026-12-07_s35_late_fences.patch): the dS^T and dQ-tile proxy fences (and the arrivals after them) moved after the
# next products are issued / dK is waited for (6% of the samples on the two fences, long scoreboard).
#   bash bench/gpu_calls/2026-12-07_s35_call4.sh OUT_DIR   (carry [".devtmp"]; ~400 s)
# Prebuilt: tools/prebuild_gpu.sh gpu; tools/prebuild_gpu.sh st bench/gpu_calls/2026-12-07_s35_early_stats.patch;
#   tools/prebuild_gpu.sh sf bench/gpu_calls/2026-12-07_s35_early_stats.patch bench/gpu_calls/2026-12-07_s35_late_fences.patch
set -u
OUT=$1
. "$(dirname "$0")/build_gpu.sh"
P=bench/gpu_calls/2026-12-07_s35
build_variants $OUT st=${P}_early_stats.patch sf=${P}_early_stats.patch+${P}_late_fences.patch
smoke_builds 16 st sf
for round in 1 2; do
  for H in 16 32; do
    attn_ms cudnn $B cudnn 128 $H fwd_bwd
    for bin in $B $OK; do attn_ms $bin $bin flash 128 $H fwd_bwd; done
  done
  attn_ms cudnn $B cudnn 64 32 fwd_bwd
  for bin in $B $OK; do attn_ms $bin $bin flash 64 32 fwd_bwd; done
done
echo "timed $SECONDS s"
names=""
for b in $OK; do names="$names ${b#build-}"; done
[ -n "$names" ] && test_builds $names
echo "tests done $SECONDS s, passed:$PASSED"
KEEP="--activation-checkpointing --checkpoint-keep-attention --tiled-loss-tokens 8192 --checkpoint-placement auto"
for b in $B $PASSED; do
  run_bounded q3_$(basename $b) 50 $b/seqpar bench train --preset qwen3-1.7b --seq-lens 32768 --steps 4 $KEEP \
    --attn-implementation flash_attention_3
done
for b in $B $PASSED; do
  run_bounded l1_$(basename $b) 60 $b/seqpar bench train --preset llama-3.2-1b --seq-lens 65536 --steps 3 $KEEP
done
echo "done $SECONDS s"
