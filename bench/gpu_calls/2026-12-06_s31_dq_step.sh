#!/bin/bash
# Thirty-first session, call 3 (run as a one-off command on the warm H200 after 2026-12-06_s30_stmatrix.sh, whose
# build-stm served as the baseline; this script builds the baseline itself): the stmatrix backward
# (2026-12-06_s30_stmatrix_dq.patch, on main since this session) in a training step. Llama-3.2-1B shape at 64K
# (head dim 64: auto runs seqpar's backward) with the tree before the patch and with it, alternating, then an
# op-level profile of Qwen3-1.7B at 32K (head dim 128: cuDNN's backward under auto, unchanged by the patch).
#   bash bench/gpu_calls/2026-12-06_s31_dq_step.sh OUT_DIR   (~300 s with the baseline's build; carry [".devtmp/utf8proc"])
set -u
OUT=$1
. "$(dirname "$0")/build_gpu.sh"
rm -rf /tmp/base && mkdir -p /tmp/base && tar --exclude='./build*' --exclude=./.devtmp --exclude=./.git -cf - . |
  tar -xf - -C /tmp/base && (cd /tmp/base && patch -R -p1 < bench/gpu_calls/2026-12-06_s30_stmatrix_dq.patch > /dev/null) ||
  { echo "reverse patch failed"; exit 1; }
build_gpu $OUT seqpar
build_other base /tmp/base "" seqpar
KEEP="--activation-checkpointing --checkpoint-keep-attention --tiled-loss-tokens 8192 --checkpoint-placement auto"
for r in 1 2; do
  for b in build-base $B; do
    timeout 60 $b/seqpar bench train --preset llama-3.2-1b --seq-lens 65536 --steps 3 $KEEP --out $OUT/l1b_${b}_$r.jsonl \
      > $OUT/l1b_${b}_$r.log 2>&1
    echo "$b rc=$? $(train_fields $OUT/l1b_${b}_$r.jsonl)"
  done
done
timeout 60 $B/seqpar bench train --preset qwen3-1.7b --seq-lens 32768 --steps 3 $KEEP --profile --out $OUT/q3p.jsonl > $OUT/q3p.log 2>&1
echo "q3 profile rc=$? $(train_fields $OUT/q3p.jsonl)"
echo "done $SECONDS s"
