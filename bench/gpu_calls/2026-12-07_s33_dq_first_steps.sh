#!/bin/bash
# Thirty-third session: 2026-12-07_s32_dq_first_short.sh's order (the prebuilt default, a and d; forward + backward
# at D = 128 beside cuDNN first, also at Qwen2.5's H 12 / Hkv 2), then both builds' attention tests at once, then, as END allows (default 430 s),
# Qwen3-1.7B 32K steps: this tree's auto (cuDNN's backward at D = 128) against each build whose tests passed with
# every call on its own kernel (`--attn-implementation flash_attention_3`), and the ALST recipe.
#   TIMING_ONLY=1 (~150 s): stop after the timings.
#   END=430 bash bench/gpu_calls/2026-12-07_s33_dq_first_steps.sh OUT_DIR   (carry [".devtmp"])
set -u
OUT=$1
. "$(dirname "$0")/build_gpu.sh"
P=bench/gpu_calls/2026-12-06_s31
build_variants $OUT a=${P}_dq_first.patch d=${P}_dq_first.patch+${P}_early_dv.patch
attn_rounds fwd_bwd 128 build-a build-d
# Qwen2.5-1.5B's head layout (H 12 over Hkv 2, a GQA group of 6), never timed before: cuDNN, then each build's kernel.
attn_ms cudnn $B cudnn 128 12 fwd_bwd 2
for bin in $B build-a build-d; do attn_ms $bin $bin flash 128 12 fwd_bwd 2; done
echo "timed $SECONDS s"
[ "${TIMING_ONLY:-0}" = 1 ] && exit 0  # the shortest call: the timings alone (a build lands only with its tests passed)
test_builds a d
V=$PASSED
KEEP="--activation-checkpointing --checkpoint-keep-attention --tiled-loss-tokens 8192 --checkpoint-placement auto"
peer_env $OUT
run_bounded q3_base 40 $B/seqpar bench train --preset qwen3-1.7b --seq-lens 32768 --steps 3 $KEEP
for bin in $V; do
  run_bounded q3_$(basename $bin) 40 $bin/seqpar bench train --preset qwen3-1.7b --seq-lens 32768 --steps 3 $KEEP \
    --attn-implementation flash_attention_3
done
# Qwen2.5-1.5B at 64K: auto against every call on the default build's own kernel (the GQA-6 question above).
run_bounded q25_64k_base 60 $B/seqpar bench train --preset qwen2.5-1.5b --seq-lens 65536 --steps 3 $KEEP
run_bounded q25_64k_own 60 $B/seqpar bench train --preset qwen2.5-1.5b --seq-lens 65536 --steps 3 $KEEP \
  --attn-implementation flash_attention_3
run_bounded q3_alst 70 python3 bench/peers/alst_train_step.py --preset qwen3-1.7b --seq-lens 32768 --steps 3 --torch-adam
echo "done $SECONDS s"
