#!/bin/bash
# NOT RUN: superseded by 2026-12-06_s20_fa3_lean.sh (the twentieth session, a short device budget), which ran
# the patch's tests and benchmarks; the patch is on main since.
# Pending GPU call (written in the nineteenth session, not yet run: its device time was spent on
# starts that found no machine and on call 1, which hung). Verifies and measures
# 2026-12-05_s19_fa3_schedule.patch (issue 15 item 5: the sm_90 forward on FlashAttention-3's
# schedule, the D = 64 backward in 128-query steps, the dQ writer warp behind SEQPAR_EXP_DQ_WRITER=1,
# the forward's ping-pong forced on or off by SEQPAR_EXP_FWD_PINGPONG=1/0: experiment switches, dropped
# once measured)
# against this tree, built side by side:
#   1. seqpar's flash kernel (this tree, the patched tree with and without the dQ writer), seqpar's
#      cuDNN path and PyTorch's cuDNN SDPA, S = 16K and 64K, D = 64 and 128, H = 32, Hkv = 8, causal;
#   2. the patched tree's attention tests (the op harness on every CUDA path, the sm_90 routes, the
#      split-keys merge), and the split-keys test with the dQ writer.
# Every command is bounded. Call 1 of the same session ran the first version of the patch and
# hung in the backward (setmaxnreg asked for more registers than the block had; fixed in the patch).
#   bash bench/gpu_calls/2026-12-05_s19_pending_fa3.sh OUT_DIR
set -u
OUT=$1
END=${END:-585}  # the call's seconds: the optional parts stop in time
. "$(dirname "$0")/build_gpu.sh"
NEW=/tmp/new
mkdir -p $NEW /tmp/newlog && tar --exclude=./build-gpu --exclude=./.git -cf - . | tar -xf - -C $NEW
P=bench/gpu_calls/2026-12-05_s19_fa3_schedule.patch
( cd $NEW && { patch -p1 < $P || git apply $P; } > /tmp/newlog/patch.log &&
  . bench/gpu_calls/build_gpu.sh && build_gpu /tmp/newlog seqpar test_cuda ) > $OUT/new_build.txt 2>&1 &
new_pid=$!
build_gpu $OUT seqpar
wait $new_pid; echo "patched: $(tail -1 $OUT/new_build.txt) at $SECONDS s"
BN=$NEW/build-gpu
A="--seq-lens 16384,65536 --head-dims 64,128 --heads 32 --kv-heads 8 --warmup 1 --iters 5"
run_attn() {  # NAME BINARY BACKEND PASSES
  timeout 45 $2 bench attention --backend $3 $A --passes $4 > $OUT/attn_$1.log 2>&1 || echo "bench $1 rc=$?"
  grep '"tflops"' $OUT/attn_$1.log | sed "s/^{/{\"tag\":\"$1\",/" >> $OUT/attn.jsonl
}
run_attn new_fwd $BN/seqpar flash fwd
SEQPAR_EXP_FWD_PINGPONG=0 run_attn new_fwd_pp0 $BN/seqpar flash fwd  # D=128 without ping-pong
SEQPAR_EXP_FWD_PINGPONG=1 run_attn new_fwd_pp1 $BN/seqpar flash fwd  # D=64's 3 warpgroups with it
run_attn base_fwd $B/seqpar flash fwd
run_attn cudnn $B/seqpar cudnn fwd,fwd_bwd
run_attn new $BN/seqpar flash fwd_bwd
SEQPAR_EXP_DQ_WRITER=1 run_attn new_dqw $BN/seqpar flash fwd_bwd
run_attn base $B/seqpar flash fwd_bwd
timeout 60 python3 bench/peers/torch_sdpa.py --seq-lens 16384,65536 --head-dims 64,128 --heads 32 --kv-heads 8 --backends cudnn \
  --layout bshd --iters 5 --warmup 1 > $OUT/attn_torch.log 2>&1 || echo "torch sdpa rc=$?"
grep '"tflops"' $OUT/attn_torch.log | sed 's/^{/{"tag":"torch_cudnn",/' >> $OUT/attn.jsonl
python3 - $OUT/attn.jsonl <<'PY'
import json, sys
rows = {}
for l in open(sys.argv[1]):
    d = json.loads(l)
    rows.setdefault((d["D"], d["S"], d["pass"]), {})[d["tag"]] = d["tflops"]
for k in sorted(rows):
    print("D=%d S=%d %-8s" % k, "  ".join("%s %.0f" % (i, t) for i, t in rows[k].items()))
PY
t=$SECONDS
timeout 240 $BN/test_cuda --gtest_filter='CudaAttentionSm90*:CudaAttention*:CudaOpHarness.EveryAttentionCaseOnEveryCudaPath:CudaSpAttention.*' > $OUT/test_attn.log 2>&1
echo "attention tests rc=$? $((SECONDS - t)) s"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|Failure" $OUT/test_attn.log | head
grep -B2 -A6 "Failure" $OUT/test_attn.log | head -40
t=$SECONDS
SEQPAR_EXP_DQ_WRITER=1 SEQPAR_EXP_FWD_PINGPONG=1 timeout 40 $BN/test_cuda \
  --gtest_filter='CudaAttention.SplitKeys*:CudaAttention.WriteEqualsAccumulateIntoZeros:CudaAttentionSm90.AutoRoutes*' > $OUT/test_attn_dqw.log 2>&1
echo "attention tests (dQ writer, ping-pong on) rc=$? $((SECONDS - t)) s"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|Failure" $OUT/test_attn_dqw.log | head
t=$SECONDS
SEQPAR_EXP_FWD_PINGPONG=0 timeout 30 $BN/test_cuda --gtest_filter='CudaAttention.SplitKeys*:CudaAttentionSm90.AutoRoutes*' > $OUT/test_attn_pp0.log 2>&1
echo "attention tests (ping-pong off) rc=$? $((SECONDS - t)) s"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|Failure" $OUT/test_attn_pp0.log | head
fields() { grep -o '"step_ms":[0-9.]*\|"peak_mem_gib":[0-9.]*\|"loss":[0-9.]*' $1 | tr '\n' ' '; }
# Issue 16's GPT-1.3B preset at 32K keeping attention (and without checkpointing) beside transformers'
# GPT2LMHeadModel (gradient checkpointing, as the eleventh session measured it), if time is left.
gpt() {  # NAME LIMIT COMMAND...
  local name=$1 lim=$2; shift 2
  [ $((SECONDS + lim)) -gt $END ] && { echo "$name: skipped (time)"; return; }
  timeout $lim "$@" --out $OUT/$name.jsonl > $OUT/$name.log 2>&1
  echo "$name rc=$?: $(fields $OUT/$name.jsonl)"
}
gpt gpt_keep 45 $B/seqpar bench train --preset gpt-1.3b-32k --seq-lens 32768 --steps 4 --activation-checkpointing \
  --checkpoint-keep-attention
gpt gpt_hf 75 python3 bench/peers/hf_train_step.py --preset gpt-1.3b-32k --seq-lens 32768 --gradient-checkpointing --steps 4
gpt gpt_nockpt 45 $B/seqpar bench train --preset gpt-1.3b-32k --seq-lens 32768 --steps 4
# The training step it is for (Llama-3.2-1B, 64K, checkpointing keeping attention), if time is left:
# the patched flash kernel against this tree's flash kernel and its sdpa (cuDNN) default.
for v in "patched $BN/seqpar flash_attention_2" "base $B/seqpar flash_attention_2" "base $B/seqpar sdpa"; do
  set -- $v
  [ $((SECONDS + 90)) -gt $END ] && break
  timeout 90 $2 bench train --preset llama-3.2-1b --seq-lens 65536 --steps 4 --attn-implementation $3 \
    --tiled-loss-tokens 4096 --activation-checkpointing --checkpoint-keep-attention --out $OUT/train_$1_$3.jsonl \
    > $OUT/train_$1_$3.log 2>&1
  echo "train 1B 64K $1 $3 rc=$?: $(fields $OUT/train_$1_$3.jsonl)"
done
echo "done $SECONDS s"
