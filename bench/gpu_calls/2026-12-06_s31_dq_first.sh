#!/bin/bash
# Thirty-first session: the sm_90 backward's product order. Today a step issues dV, dK, then dQ, and waits for dQ
# before storing it to shared memory, so the tensor pipe idles through dQ's stores, the dQ-tile barrier and the
# fence. Two builds, each a patch on this tree (applied to copies of it, no setup needed):
# - a (2026-12-06_s31_dq_first.patch): dQ's product issued before dK's (FlashAttention-3's order): dQ's trip to shared
#   memory runs under dK's product; the stage is released after dK;
# - d (+ _early_dv.patch): at D = 128 also dV's product issued before dP^T is waited for, so dV runs while dS^T is
#   computed (at D = 64 the registers do not allow it: ptxas serializes and spills).
# ptxas: 168 registers at launch, no spills, no serialization, all four instantiations, both builds.
# 1. both builds' attention tests (at once, on the one GPU); 2. forward+backward at D = 128 / 64, H 32 (two rounds)
# and H 16 over Hkv 8, 16K / 64K, beside cuDNN and this tree; 3. ncu of each backward (16K, H 32, D = 128);
# 4. Qwen3-1.7B 32K steps: this tree's auto (cuDNN's backward at D = 128) against a / d with every call on the flash
# kernel (`--attn-implementation flash_attention_3`), two alternating rounds with the ALST recipe between them; then
# the Llama-3.2-1B shape at 64K (D = 64) with each build, as time allows (END, default 585 s).
#   bash bench/gpu_calls/2026-12-06_s31_dq_first.sh OUT_DIR   (~580 s, carry [".devtmp"])
# Built here first, the call skips its ~170 s of builds (tools/prebuild_gpu.sh; the patches as named below):
#   tools/prebuild_gpu.sh gpu; tools/prebuild_gpu.sh a bench/gpu_calls/2026-12-06_s31_dq_first.patch
#   tools/prebuild_gpu.sh d bench/gpu_calls/2026-12-06_s31_dq_first.patch bench/gpu_calls/2026-12-06_s31_early_dv.patch
set -u
OUT=$1
. "$(dirname "$0")/build_gpu.sh"
P=bench/gpu_calls/2026-12-06_s31
build_variants $OUT a=${P}_dq_first.patch d=${P}_dq_first.patch+${P}_early_dv.patch

test_builds a d
# Two suites at once on one GPU: a failure may be the other's memory; such a build is tested again alone.
for n in a d; do
  [[ " $PASSED " == *" build-$n "* ]] || { echo "$n again, alone:"; test_build $n && PASSED="$PASSED build-$n"; }
done
V=$PASSED
[ -z "$V" ] && { echo "no build passed"; exit 1; }
for D in ${DS:-128 64}; do attn_rounds fwd_bwd $D $V; done
[ "${NCU:-1}" = 1 ] && bwd_stalls 60 $B $V
KEEP="--activation-checkpointing --checkpoint-keep-attention --tiled-loss-tokens 8192 --checkpoint-placement auto"
END=${END:-585}
peer_env $OUT
q3_round() {
  run_bounded q3_base_$1 40 $B/seqpar bench train --preset qwen3-1.7b --seq-lens 32768 --steps 3 $KEEP
  for bin in $V; do
    run_bounded q3_$(basename $bin)_$1 40 $bin/seqpar bench train --preset qwen3-1.7b --seq-lens 32768 --steps 3 $KEEP \
      --attn-implementation flash_attention_3
  done
}
q3_round 1
run_bounded q3_alst 70 python3 bench/peers/alst_train_step.py --preset qwen3-1.7b --seq-lens 32768 --steps 3 --torch-adam
q3_round 2
for bin in $B $V; do
  run_bounded l1b_$(basename $bin) 45 $bin/seqpar bench train --preset llama-3.2-1b --seq-lens 65536 --steps 3 $KEEP
done
# With the builds prebuilt there is time for 64K (issue 17's other length): each model with this tree's auto, each
# build's own backward, and the ALST recipe, as long as END allows.
for m in qwen3-1.7b qwen2.5-1.5b; do
  run_bounded ${m}_64k_base 60 $B/seqpar bench train --preset $m --seq-lens 65536 --steps 3 $KEEP
  for bin in $V; do
    run_bounded ${m}_64k_$(basename $bin) 60 $bin/seqpar bench train --preset $m --seq-lens 65536 --steps 3 $KEEP \
      --attn-implementation flash_attention_3
  done
  run_bounded ${m}_64k_alst 90 python3 bench/peers/alst_train_step.py --preset $m --seq-lens 65536 --steps 3 --torch-adam
done
echo "done $SECONDS s"
