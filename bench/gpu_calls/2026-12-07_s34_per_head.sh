#!/bin/bash
# Thirty-fourth session, for the next call: does the own D = 128 backward lose to cuDNN at large GQA groups because of
# L2? The thirty-fourth session measured it 0.97-1.00x cuDNN's forward+backward at group 2, 0.97-1.01x at 4, 0.90x at
# 6 (H 48 / Hkv 8) and 0.81x / 0.90x at Qwen2.5's H 12 / Hkv 2: a block walks the group's G heads inside every query
# tile, so the rows that must stay in L2 grow with G. `ph` (2026-12-07_s34_per_head.patch, the twenty-ninth session's
# per-head split on today's kernel) runs a block per (key tile, query head), dK / dV per head into f32 [Tk, H, D]
# scratch summed per group by a second kernel (at G = 4 it was 2-7% faster, at G = 2 2% slower: twenty-ninth session).
# (The session's call 3 ran the timings, TIMING_ONLY=1: ph 0.97-0.98x cuDNN at group 6, 3-4% slower than the default at
# group 2; bench/NOTES.md. The rest of the script has not run.)
#   bash bench/gpu_calls/2026-12-07_s34_per_head.sh OUT_DIR   (carry [".devtmp"]; ~200 s, END=… for the steps)
#   Then the default's and ph's attention tests at once, then (if ph's passed) Qwen2.5-1.5B 64K steps.
#   TIMING_ONLY=1: stop after the timings.
#   NCU=1: ncu's L2 hit rate and DRAM throughput of each backward at H 12 / Hkv 2, 16K (~60 s more).
# Prebuilt: tools/prebuild_gpu.sh gpu; tools/prebuild_gpu.sh ph bench/gpu_calls/2026-12-07_s34_per_head.patch
set -u
OUT=$1
. "$(dirname "$0")/build_gpu.sh"
build_variants $OUT ph=bench/gpu_calls/2026-12-07_s34_per_head.patch
# forward+backward at D = 128: cuDNN, the default's and ph's own kernels, group 6 twice (Qwen2.5's layout and 8 KV
# heads), then groups 4 and 2.
for round in 1 2; do
  for hh in "12 2" "48 8"; do
    set -- $hh
    attn_ms cudnn $B cudnn 128 $1 fwd_bwd $2
    for bin in $B build-ph; do attn_ms $bin $bin flash 128 $1 fwd_bwd $2; done
  done
done
for hh in "32 8" "16 8"; do
  set -- $hh
  attn_ms cudnn $B cudnn 128 $1 fwd_bwd $2
  for bin in $B build-ph; do attn_ms $bin $bin flash 128 $1 fwd_bwd $2; done
done
echo "timed $SECONDS s"
[ "${TIMING_ONLY:-0}" = 1 ] && exit 0  # the shortest call (~40 s): the timings alone
if [ "${NCU:-0}" = 1 ]; then
  m="lts__t_sector_hit_rate.pct,dram__throughput.avg.pct_of_peak_sustained_elapsed,gpu__time_duration.sum"
  for x in "cudnn $B cudnn" "gpu $B flash" "ph build-ph flash"; do
    set -- $x
    timeout 60 ncu --clock-control none --metrics "$m" -k regex:"bwd|dgrad|sdpa|cudnn|flash" -c 6 $2/seqpar bench \
      attention --backend $3 --seq-lens 16384 --heads 12 --kv-heads 2 --passes fwd_bwd --head-dims 128 --warmup 0 \
      --iters 1 > $OUT/ncu_$1.log 2>&1
    echo "#### ncu $1 rc=$?"; grep -E "^  [a-zA-Z_]|hit_rate|dram__|duration" $OUT/ncu_$1.log | head -24
  done
fi
# The committed tree's attention tests (its D = 128 order was tested as the thirty-first session's patch `a`; this
# runs the code as committed) beside ph's, at once.
test_builds gpu ph
[[ " $PASSED " == *" build-ph "* ]] || exit 0
# Qwen2.5-1.5B at 64K: auto (cuDNN's backward) against ph's own kernel on every call.
KEEP="--activation-checkpointing --checkpoint-keep-attention --tiled-loss-tokens 8192 --checkpoint-placement auto"
run_bounded q25_64k_base 60 $B/seqpar bench train --preset qwen2.5-1.5b --seq-lens 65536 --steps 3 $KEEP
run_bounded q25_64k_ph 60 build-ph/seqpar bench train --preset qwen2.5-1.5b --seq-lens 65536 --steps 3 $KEEP \
  --attn-implementation flash_attention_3
echo "done $SECONDS s"
