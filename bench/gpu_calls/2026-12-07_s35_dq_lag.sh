#!/bin/bash
# Thirty-fifth session: the D = 128 (and 64) backward with dQ one step late. Today the two consumer warpgroups meet at
# the dS^T barrier every step, so both run their elementwise part (exp, dS) at the same time with none of their
# products queued (twenty-ninth and thirty-first sessions' counts). `lag` (2026-12-07_s35_dq_lag.patch) issues step
# it's dQ product in step it + 1, behind two mbarriers per dS^T buffer (written by both warpgroups; read by both dQ
# products), and gives each warpgroup its own dQ-tile barrier with the writer warp: nothing makes one warpgroup wait
# for the other inside a step. `off` (+ 2026-12-07_s35_wg_offset.patch) also starts warpgroup 1 when warpgroup 0 has
# issued its first dV, half a step apart.
#   bash bench/gpu_calls/2026-12-07_s35_dq_lag.sh OUT_DIR   (carry [".devtmp"]; ~450 s; END=… bounds the steps)
# Prebuilt: tools/prebuild_gpu.sh gpu; tools/prebuild_gpu.sh lag bench/gpu_calls/2026-12-07_s35_dq_lag.patch;
#   tools/prebuild_gpu.sh off bench/gpu_calls/2026-12-07_s35_dq_lag.patch bench/gpu_calls/2026-12-07_s35_wg_offset.patch
set -u
OUT=$1
. "$(dirname "$0")/build_gpu.sh"
build_variants $OUT lag=bench/gpu_calls/2026-12-07_s35_dq_lag.patch \
  off=bench/gpu_calls/2026-12-07_s35_dq_lag.patch+bench/gpu_calls/2026-12-07_s35_wg_offset.patch
smoke_builds 16 lag off
# forward+backward: cuDNN, the committed kernel, the variants; D = 128 at groups 2 and 4 (two rounds), D = 64 at 4.
for round in 1 2; do
  for H in 16 32; do
    attn_ms cudnn $B cudnn 128 $H fwd_bwd
    for bin in $B $OK; do attn_ms $bin $bin flash 128 $H fwd_bwd; done
  done
done
attn_ms cudnn $B cudnn 64 32 fwd_bwd
for bin in $B $OK $B $OK; do attn_ms $bin $bin flash 64 32 fwd_bwd; done
echo "timed $SECONDS s"
[ "${TIMING_ONLY:-0}" = 1 ] && exit 0
names=""
for b in $OK; do names="$names ${b#build-}"; done
[ -n "$names" ] && test_builds $names
echo "tests done $SECONDS s, passed:$PASSED"
# Qwen3-1.7B 32K (D = 128, H 16 / Hkv 8): auto (cuDNN's backward) against each passing variant's own kernel both ways.
KEEP="--activation-checkpointing --checkpoint-keep-attention --tiled-loss-tokens 8192 --checkpoint-placement auto"
run_bounded q3_auto 90 $B/seqpar bench train --preset qwen3-1.7b --seq-lens 32768 --steps 4 $KEEP
for b in $PASSED; do
  run_bounded q3_${b#build-} 90 $b/seqpar bench train --preset qwen3-1.7b --seq-lens 32768 --steps 4 $KEEP \
    --attn-implementation flash_attention_3
done
# Llama-3.2-1B 64K (D = 64: auto runs the own backward), the committed kernel against each passing variant.
run_bounded l1_auto 90 $B/seqpar bench train --preset llama-3.2-1b --seq-lens 65536 --steps 3 $KEEP
for b in $PASSED; do
  run_bounded l1_${b#build-} 90 $b/seqpar bench train --preset llama-3.2-1b --seq-lens 65536 --steps 3 $KEEP
done
echo "done $SECONDS s"
