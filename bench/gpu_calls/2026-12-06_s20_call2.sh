#!/bin/bash
# GPU call 2 (twentieth session): the GPT-1.3B preset at 32K keeping attention beside transformers'
# GPT2LMHeadModel (issue 16's ≥ 1.5×: the eleventh call measured 1.30× with plain checkpointing), and
# without checkpointing (both, where it fits), and Qwen2.5-1.5B at 32K keeping attention beside the ALST recipe (issue 17: 1.43× before), on this tree,
# with the default attention (sdpa = the per-call rule) and the flash kernel; then the GPU tests the
# eighteenth session could not run (op harness, model, training) if time is left.
#   bash bench/gpu_calls/2026-12-06_s20_call2.sh OUT_DIR
set -u
OUT=$1
. "$(dirname "$0")/build_gpu.sh"
build_gpu $OUT seqpar test_cuda
peer_env $OUT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
fields() { grep -o '"impl":"[a-z]*"\|"attn[a-z_]*":"[a-z_0-9]*"\|"step_ms":[0-9.]*\|"tokens_per_s_per_gpu":[0-9.]*\|"peak_mem_gib":[0-9.]*\|"loss":[0-9.]*\|"error":"[^"]*"' $1 | tr '\n' ' '; }
run() {  # NAME LIMIT COMMAND...
  local name=$1 lim=$2; shift 2
  local t=$SECONDS
  [ $((SECONDS + lim)) -gt 585 ] && { echo "$name: skipped (time)"; return; }
  timeout $lim "$@" --out $OUT/$name.jsonl > $OUT/$name.log 2>&1
  echo "$name rc=$? $((SECONDS - t)) s: $(fields $OUT/$name.jsonl)"
}
KEEP="--activation-checkpointing --checkpoint-keep-attention"
run gpt_keep_sdpa 50 $B/seqpar bench train --preset gpt-1.3b-32k --seq-lens 32768 --steps 4 $KEEP
run gpt_keep_flash 50 $B/seqpar bench train --preset gpt-1.3b-32k --seq-lens 32768 --steps 4 $KEEP \
  --attn-implementation flash_attention_2
run gpt_ckpt 50 $B/seqpar bench train --preset gpt-1.3b-32k --seq-lens 32768 --steps 4 --activation-checkpointing
run gpt_nockpt 50 $B/seqpar bench train --preset gpt-1.3b-32k --seq-lens 32768 --steps 4
run gpt_hf 80 python3 bench/peers/hf_train_step.py --preset gpt-1.3b-32k --seq-lens 32768 --gradient-checkpointing --steps 4
run gpt_hf_nockpt 80 python3 bench/peers/hf_train_step.py --preset gpt-1.3b-32k --seq-lens 32768 --steps 4
run qwen_keep_sdpa 50 $B/seqpar bench train --preset qwen2.5-1.5b --seq-lens 32768 --steps 4 $KEEP --tiled-loss-tokens 8192
run qwen_keep_flash 50 $B/seqpar bench train --preset qwen2.5-1.5b --seq-lens 32768 --steps 4 $KEEP --tiled-loss-tokens 8192 \
  --attn-implementation flash_attention_2
run qwen_alst 120 python3 bench/peers/alst_train_step.py --preset qwen2.5-1.5b --seq-lens 32768 --steps 3 --torch-adam
t=$SECONDS
lim=$((590 - SECONDS)); [ $lim -gt 400 ] && lim=400
if [ $lim -gt 30 ]; then
  timeout $lim $B/test_cuda --gtest_filter='CudaOpHarness.*:CudaModel.*:CudaTrain.*' > $OUT/test_cuda.log 2>&1
  echo "test_cuda rc=$? $((SECONDS - t)) s (limit $lim)"
  grep -E "^\[  (PASSED|FAILED) |FAILED  \]|tests ran|Failure" $OUT/test_cuda.log | head -20
  grep -E "^\[       OK \]" $OUT/test_cuda.log | wc -l
  tail -2 $OUT/test_cuda.log
fi
echo "done $SECONDS s"
