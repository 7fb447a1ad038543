#!/bin/bash
# Thirty-sixth session, call 1: the thirty-fifth session's two backward builds and one forward build, on the landed
# kernels (57ee73d / 3ab086f).
#   `ho` (2026-12-07_s35_head_outer.patch): from 4 query heads per KV head a backward block walks every query tile of one
#     head before the next head (D = 128 H 32 / Hkv 8, Qwen2.5's 12 / 2 and the 1B shape's D = 64 H 32 / Hkv 8).
#   `fe` (2026-12-07_s36_late_fences.patch): the backward's dS^T and dQ-tile proxy fences after the next products.
#   `rs` (2026-12-07_s36_tc_rowsum.patch): the D = 64 forward's row sums of P on the tensor cores (P V as m64n72 with
#     a block of ones for columns 64..71): no FADD per score, the sum that of the very P that multiplies V.
# Order: smoke, two rounds of timings beside cuDNN, the attention tests of the three builds, then Llama-3.2-1B 64K
# steps (landed / each passing build) with the ALST recipe, and a profiled step of the landed build, as END allows.
#   bash bench/gpu_calls/2026-12-07_s36_call1.sh OUT_DIR   (carry [".devtmp"]; ~580 s; TIMING_ONLY=1 ~150 s)
# Prebuilt: tools/prebuild_gpu.sh gpu; ... ho <head_outer patch>; ... fe <late_fences patch>; ... rs <tc_rowsum patch>
set -u
OUT=$1
. "$(dirname "$0")/build_gpu.sh"
G=bench/gpu_calls
build_variants $OUT ho=$G/2026-12-07_s35_head_outer.patch fe=$G/2026-12-07_s36_late_fences.patch \
  rs=$G/2026-12-07_s36_tc_rowsum.patch
smoke_builds 32 ho fe rs
has() { [[ " $OK " == *" build-$1 "* ]] && echo build-$1; }
BW="$(has ho) $(has fe)"
FW="$(has rs)"
for round in 1 2; do
  for hh in "32 8" "16 8" "12 2"; do
    set -- $hh
    attn_ms cudnn $B cudnn 128 $1 fwd_bwd $2
    for bin in $B $BW; do attn_ms $bin $bin flash 128 $1 fwd_bwd $2; done
  done
  attn_ms cudnn $B cudnn 64 32 fwd_bwd
  for bin in $B $BW $FW; do attn_ms $bin $bin flash 64 32 fwd_bwd; done
  for h in 32 16; do
    attn_ms cudnn $B cudnn 64 $h fwd
    for bin in $B $FW; do attn_ms $bin $bin flash 64 $h fwd; done
  done
done
echo "timed $SECONDS s"
[ "${TIMING_ONLY:-0}" = 1 ] && exit 0
names=""
for b in $OK; do names="$names ${b#build-}"; done
[ -n "$names" ] && test_builds $names
echo "tests done $SECONDS s, passed:$PASSED"
KEEP="--activation-checkpointing --checkpoint-keep-attention --tiled-loss-tokens 8192 --checkpoint-placement auto"
peer_env $OUT
END=${END:-585}
run_bounded l1_gpu 40 $B/seqpar bench train --preset llama-3.2-1b --seq-lens 65536 --steps 3 $KEEP
for b in $PASSED; do
  run_bounded l1_${b#build-} 40 $b/seqpar bench train --preset llama-3.2-1b --seq-lens 65536 --steps 3 $KEEP
done
run_bounded l1_alst 90 python3 bench/peers/alst_train_step.py --preset llama-3.2-1b --seq-lens 65536 --steps 3 --torch-adam
run_bounded l1_prof 45 $B/seqpar bench train --preset llama-3.2-1b --seq-lens 65536 --steps 3 $KEEP --profile
run_bounded l1_gpu_b 40 $B/seqpar bench train --preset llama-3.2-1b --seq-lens 65536 --steps 3 $KEEP
echo "done $SECONDS s"
