#!/bin/bash
# Thirty-seventh session, call 3 (run with the budget left; bench/NOTES.md): where Qwen3-1.7B's 32K step and the
# Llama-3.2-1B 128K step go on the landed tree (SwiGLU's h computed again), for issues 15 and 17 (both short of 1.5×
# the ALST recipe there: 1.470× and 1.484× on an H100), and the own attention kernel beside cuDNN on the Qwen shapes'
# head layouts (D 128: Qwen3 16 / 8, Qwen2.5 12 / 2) forward+backward and forward alone, 16K and 64K.
#   bash bench/gpu_calls/2026-12-07_s38_call1.sh OUT_DIR   (carry [".devtmp"]; ~200 s; prebuilt: tools/prebuild_gpu.sh gpu)
set -u
REAL_OUT=$1
OUT=/tmp/s38c1
mkdir -p $OUT
. "$(dirname "$0")/build_gpu.sh"
trap "pack_logs $OUT $REAL_OUT" EXIT
build_variants $OUT
END=${END:-560}
KEEP="--activation-checkpointing --checkpoint-keep-attention --tiled-loss-tokens 8192 --checkpoint-placement auto"
run_bounded q3_prof 40 $B/seqpar bench train --preset qwen3-1.7b --seq-lens 32768 --steps 3 $KEEP --profile
grep -A45 "^profile" $OUT/q3_prof.log > $REAL_OUT/q3_prof.txt; head -40 $REAL_OUT/q3_prof.txt
run_bounded l1_128_prof 70 $B/seqpar bench train --preset llama-3.2-1b --seq-lens 131072 --steps 3 $KEEP --profile
grep -A45 "^profile" $OUT/l1_128_prof.log > $REAL_OUT/l1_128_prof.txt; head -40 $REAL_OUT/l1_128_prof.txt
for pass in fwd_bwd fwd; do
  attn_ms cudnn $B cudnn 128 16 $pass 8; attn_ms flash $B flash 128 16 $pass 8
  attn_ms cudnn $B cudnn 128 12 $pass 2; attn_ms flash $B flash 128 12 $pass 2
done
echo "done $SECONDS s"
