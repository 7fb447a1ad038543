#!/bin/bash
# GPU call 1 (eighteenth session): issue 15 item 4, fewer passes over memory (the norms' backward adds
# into the residual gradient, the loss backward reads the forward's logsumexp and writes over the
# logits, the layer's residuals read by the GEMMs instead of copied first). Builds this tree, then the
# base commit 78b0f63 (.devtmp/base.tgz, `git archive 78b0f63 | gzip`) while the GPU op harness and the
# model / training tests run; times the Llama-3.2-1B shape at 64K before and after, interleaved; the
# peaks of the plan test's H200 points; the ALST recipe in the same call if time is left.
#   bash bench/gpu_calls/2026-12-04_s18_call1.sh OUT_DIR
set -u
OUT=$1
. "$(dirname "$0")/build_gpu.sh"
build_gpu $OUT seqpar test_cuda
mkdir -p /tmp/base /tmp/baselog && tar -xzf .devtmp/base.tgz -C /tmp/base && cp -r .devtmp /tmp/base/
( cd /tmp/base && . bench/gpu_calls/build_gpu.sh && build_gpu /tmp/baselog seqpar ) > $OUT/base_build.txt 2>&1 &
base_pid=$!
t=$SECONDS
timeout 170 $B/test_cuda --gtest_filter='CudaOpHarness.*:CudaModel.*:CudaTrain.*' > $OUT/test_cuda.log 2>&1
echo "test_cuda rc=$? $((SECONDS - t)) s"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|tests ran" $OUT/test_cuda.log | head -20
wait $base_pid; echo "base: $(tail -1 $OUT/base_build.txt) at $SECONDS s"
BASE=/tmp/base/build-gpu/seqpar
fields() { grep -o '"seq_len":[0-9]*\|"step_ms":[0-9.]*\|"peak_mem_gib":[0-9.]*\|"plan_peak_gib":[0-9.]*\|"loss":[0-9.]*' $1 | tr '\n' ' '; }
run() {  # run NAME BINARY ARGS...
  local name=$1 bin=$2; shift 2
  local t=$SECONDS
  timeout 90 $bin bench train --preset llama-3.2-1b --seq-lens 65536 --steps 4 --attn-implementation sdpa \
    --tiled-loss-tokens 4096 --activation-checkpointing "$@" --out $OUT/train_$name.jsonl > $OUT/$name.log 2>&1
  echo "$name rc=$? $((SECONDS - t)) s: $(fields $OUT/train_$name.jsonl)"
}
run base_ckpt $BASE
run new_ckpt $B/seqpar
run base_keep $BASE --checkpoint-keep-attention
run new_keep $B/seqpar --checkpoint-keep-attention
# The plan test's H200 points (MemoryPlan.MatchesTheH200Measurements), new binary.
for args in "" "--activation-checkpointing --tiled-loss-tokens 4096"; do
  timeout 70 $B/seqpar bench train --preset llama-3.2-1b --seq-lens 8192,32768 --steps 3 --attn-implementation sdpa \
    $args --out $OUT/points.jsonl > $OUT/points.log 2>&1; echo "points [$args] rc=$?"
done
timeout 40 $B/seqpar bench train --preset llama-3.2-1b --seq-lens 32768 --steps 3 --attn-implementation sdpa \
  --activation-checkpointing --checkpoint-keep-attention --tiled-loss-tokens 4096 --out $OUT/points.jsonl > $OUT/points.log 2>&1
while read -r l; do echo "point: $(echo "$l" | grep -o '"activation_checkpointing":[a-z]*\|"checkpoint_keep_attention":[a-z]*' | tr '\n' ' ')$(echo "$l" > /tmp/l.json; fields /tmp/l.json)"; done < $OUT/points.jsonl
timeout 45 $B/seqpar bench train --preset llama-3.2-1b --seq-lens 65536 --steps 2 --attn-implementation sdpa \
  --tiled-loss-tokens 4096 --activation-checkpointing --profile > $OUT/profile_new.log 2>&1
echo "profile done $SECONDS s"
if [ $SECONDS -lt 450 ]; then
  peer_env $OUT
  t=$SECONDS
  timeout $((575 - SECONDS)) python3 bench/peers/alst_train_step.py --preset llama-3.2-1b --seq-lens 65536 --steps 3 \
    --attn sdpa --torch-adam --out $OUT/train_alst.jsonl > $OUT/alst.log 2>&1
  echo "ALST 1B 64K rc=$? $((SECONDS - t)) s"; grep -E "^alst " $OUT/alst.log; cut -c1-600 $OUT/train_alst.jsonl
fi
