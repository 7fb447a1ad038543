#!/bin/bash
# Thirty-eighth session, call 5: the sm_90 forward's softmax with shorter dependency chains. Call 1 showed the D = 64
# forward bound by instruction issue, not by the MUFU unit; its SASS has the row maximum as a running FMNMX chain
# (16 deep per row and tile) and the row sum as one FADD chain (32 deep). t4 (2026-12-07_s38_fwd_trees_t4.patch): the
# maximum as a tree (depth 5, the same 31 FMNMX, bit-identical) and the sum in 4 partial sums; t8: 8 partial sums.
#   1. forward, cuDNN / main / t4: D = 64 at H 32 and 16, D = 128 at H 16 and 32 (Hkv 8), 16K and 64K; the D = 64
#      forward at 128K (t8 prepared, not run: the session's device time was short);
#   2. the attention tests of t4.
#   bash bench/gpu_calls/2026-12-07_s38_fwd_trees.sh OUT_DIR   (carry [".devtmp"]; ~190 s; prebuilt: gpu, t4)
set -u
REAL_OUT=$1
OUT=/tmp/s38c5
mkdir -p $OUT
. "$(dirname "$0")/build_gpu.sh"
trap "pack_logs $OUT $REAL_OUT" EXIT
P=bench/gpu_calls/2026-12-07_s38_fwd_trees
build_variants $OUT t4=${P}_t4.patch
for DH in 64:32 64:16 128:16 128:32; do
  D=${DH%%:*}; H=${DH##*:}
  attn_ms cudnn $B cudnn $D $H fwd
  for v in $B build-t4; do attn_ms $v $v flash $D $H fwd; done
done
for DH in 64:32 128:16; do  # a second round of the Llama-3.2-1B and Qwen3-1.7B layouts
  for v in build-t4 $B; do attn_ms $v $v flash ${DH%%:*} ${DH##*:} fwd; done
done
for v in cudnn:$B flash:$B flash:build-t4; do
  $(echo ${v#*:})/seqpar bench attention --backend ${v%%:*} --seq-lens 131072 --passes fwd --heads 32 --kv-heads 8 \
    --head-dims 64 --warmup 1 --iters 3 2>&1 | grep -o '"ms": *[0-9.]*' | tr '\n' ' ' | sed "s|^|128K fwd $v: |"; echo
done
echo "timings done $SECONDS s"
test_builds t4
echo "done $SECONDS s"
