#!/bin/bash
# Prepared in the thirty-fifth session for the next one (not yet run): two builds on top of the landed backward (dQ one
# step late, 57ee73d), whose D = 128 forward+backward is still behind cuDNN at 4 and more query heads per KV head
# (0.96x / 0.99x at H 32 / Hkv 8) and whose D = 64 backward is what the Llama-3.2-1B step at 64K (1.48-1.50x the ALST
# recipe on an H100) runs.
#   `ho` (2026-12-07_s35_head_outer.patch): from 4 query heads per KV head a block walks every query tile of one head
#     before the next head (the twenty-ninth session's `ho`, 6% faster at H 32 then; D = 64 with H 32 / Hkv 8 takes it too).
#   `fe` (2026-12-07_s36_late_fences.patch): the dS^T and dQ-tile proxy fences after the next products / dK's wait
#     (with early lse2 loads it was ~1% faster at D = 64, 64K, in the thirty-fifth session's call 4; alone, untimed).
# Order: smoke (30 s limit each), forward+backward two rounds (cuDNN, landed, ho, fe) at D = 128 for groups 2, 4 and 6
# and at D = 64 for group 4, the attention tests of both, then Llama-3.2-1B 64K steps (landed / each passing build)
# around the ALST recipe and Qwen2.5-1.5B 64K (group 6) on auto against ho's own kernel both ways, as END allows.
#   bash bench/gpu_calls/2026-12-07_s36_next.sh OUT_DIR   (carry [".devtmp"]; ~550 s; TIMING_ONLY=1 ~110 s)
# Prebuilt: tools/prebuild_gpu.sh gpu; tools/prebuild_gpu.sh ho bench/gpu_calls/2026-12-07_s35_head_outer.patch;
#   tools/prebuild_gpu.sh fe bench/gpu_calls/2026-12-07_s36_late_fences.patch
set -u
OUT=$1
. "$(dirname "$0")/build_gpu.sh"
P=bench/gpu_calls/2026-12-07_s35
build_variants $OUT ho=${P}_head_outer.patch fe=bench/gpu_calls/2026-12-07_s36_late_fences.patch
smoke_builds 32 ho fe
for round in 1 2; do
  for hh in "32 8" "16 8" "12 2"; do
    set -- $hh
    attn_ms cudnn $B cudnn 128 $1 fwd_bwd $2
    for bin in $B $OK; do attn_ms $bin $bin flash 128 $1 fwd_bwd $2; done
  done
  attn_ms cudnn $B cudnn 64 32 fwd_bwd
  for bin in $B $OK; do attn_ms $bin $bin flash 64 32 fwd_bwd; done
done
echo "timed $SECONDS s"
[ "${TIMING_ONLY:-0}" = 1 ] && exit 0
names=""
for b in $OK; do names="$names ${b#build-}"; done
[ -n "$names" ] && test_builds $names
echo "tests done $SECONDS s, passed:$PASSED"
KEEP="--activation-checkpointing --checkpoint-keep-attention --tiled-loss-tokens 8192 --checkpoint-placement auto"
peer_env $OUT
END=${END:-580}
run_bounded l1_gpu 40 $B/seqpar bench train --preset llama-3.2-1b --seq-lens 65536 --steps 3 $KEEP
for b in $PASSED; do
  run_bounded l1_${b#build-} 40 $b/seqpar bench train --preset llama-3.2-1b --seq-lens 65536 --steps 3 $KEEP
done
run_bounded l1_alst 90 python3 bench/peers/alst_train_step.py --preset llama-3.2-1b --seq-lens 65536 --steps 3 --torch-adam
run_bounded l1_gpu_b 40 $B/seqpar bench train --preset llama-3.2-1b --seq-lens 65536 --steps 3 $KEEP
if [[ " $PASSED " == *" build-ho "* ]]; then
  run_bounded q25_auto 60 $B/seqpar bench train --preset qwen2.5-1.5b --seq-lens 65536 --steps 3 $KEEP
  run_bounded q25_ho 60 build-ho/seqpar bench train --preset qwen2.5-1.5b --seq-lens 65536 --steps 3 $KEEP \
    --attn-implementation flash_attention_3
fi
echo "done $SECONDS s"
