#!/bin/bash
# GPU call 1 (nineteenth session): issue 15 item 5, the forward on FlashAttention-3's schedule
# (intra-warpgroup overlap of softmax and P V, ping-pong of two consumer warpgroups, K and V rings
# apart) and the backward with 128-query steps at D = 64, with and without the dQ writer warp
# (SEQPAR_EXP_DQ_WRITER=1, an experiment's switch), against the base commit (.devtmp/base.tgz, `git archive HEAD` of b4a1516) built in the same
# call, cuDNN through seqpar and PyTorch's cuDNN SDPA; the attention tests; ncu of the sm_90 backward
# (where its time goes); then the GPU tests the eighteenth session could not run.
#   bash bench/gpu_calls/2026-12-05_s19_call1.sh OUT_DIR
set -u
OUT=$1
. "$(dirname "$0")/build_gpu.sh"
mkdir -p /tmp/base /tmp/baselog && tar -xzf .devtmp/base.tgz -C /tmp/base && cp -r .devtmp /tmp/base/
( cd /tmp/base && . bench/gpu_calls/build_gpu.sh && build_gpu /tmp/baselog seqpar ) > $OUT/base_build.txt 2>&1 &
base_pid=$!
build_gpu $OUT seqpar test_cuda
wait $base_pid; echo "base: $(tail -1 $OUT/base_build.txt) at $SECONDS s"
BASE=/tmp/base/build-gpu/seqpar
t=$SECONDS
timeout 150 $B/test_cuda --gtest_filter='CudaOpHarness.EveryAttentionCaseOnEveryCudaPath:CudaAttention*:CudaSpAttention.*' > $OUT/test_attn.log 2>&1
echo "attention tests rc=$? $((SECONDS - t)) s"
grep -E "^\[  (PASSED|FAILED) |FAILED  \]|tests ran|Failure" $OUT/test_attn.log | head -20
t=$SECONDS
SEQPAR_EXP_DQ_WRITER=1 timeout 120 $B/test_cuda --gtest_filter='CudaOpHarness.EveryAttentionCaseOnEveryCudaPath:CudaAttention.WriteEqualsAccumulateIntoZeros' > $OUT/test_attn_dqw.log 2>&1
echo "attention tests (dQ writer) rc=$? $((SECONDS - t)) s"
grep -E "^\[  (PASSED|FAILED) |FAILED  \]|tests ran|Failure" $OUT/test_attn_dqw.log | head -10
A="--seq-lens 16384,65536 --head-dims 64,128 --heads 32 --kv-heads 8 --warmup 2 --iters 7"
run_attn() {  # NAME BINARY BACKEND [PASSES]
  $2 bench attention --backend $3 $A --passes ${4:-fwd,fwd_bwd} > $OUT/attn_$1.log 2>&1 || echo "bench $1 failed"
  grep '"tflops"' $OUT/attn_$1.log | sed "s/^{/{\"tag\":\"$1\",/" >> $OUT/attn.jsonl
}
run_attn base_flash $BASE flash
run_attn new_flash $B/seqpar flash
SEQPAR_EXP_DQ_WRITER=1 run_attn new_flash_dqw $B/seqpar flash fwd_bwd
run_attn cudnn $B/seqpar cudnn
run_attn base_flash2 $BASE flash fwd
run_attn new_flash2 $B/seqpar flash fwd
python3 bench/peers/torch_sdpa.py --seq-lens 16384,65536 --head-dims 64,128 --heads 32 --kv-heads 8 --backends cudnn \
  --layout bshd --iters 7 > $OUT/attn_torch.log 2>&1 || echo "torch sdpa failed"
grep '"tflops"' $OUT/attn_torch.log | sed 's/^{/{"tag":"torch_cudnn",/' >> $OUT/attn.jsonl
python3 - $OUT/attn.jsonl <<'PY'
import json, sys
rows = {}
for l in open(sys.argv[1]):
    d = json.loads(l)
    rows.setdefault((d["D"], d["S"], d["pass"]), {})[d["tag"]] = d["tflops"]
for k in sorted(rows):
    print("attn D=%d S=%d %-8s" % k, "  ".join("%s %.0f" % (i, t) for i, t in rows[k].items()))
PY
echo "bench done $SECONDS s"
for D in 128 64; do
  timeout 90 ncu --clock-control none --section SpeedOfLight --section WarpStateStats --section ComputeWorkloadAnalysis \
    --section LaunchStats --section Occupancy -k regex:bwd_sm90 -c 1 \
    $B/seqpar bench attention --backend flash --seq-lens 16384 --head-dims $D --heads 32 --kv-heads 8 \
    --passes fwd_bwd --warmup 0 --iters 1 > $OUT/ncu_bwd_d$D.log 2>&1; echo "ncu D=$D rc=$?"
  grep -E "Duration|Throughput|Stall|Registers|Warp Cycles|Issued|Eligible|Pipe|Active Warps" $OUT/ncu_bwd_d$D.log | head -40
done
echo "ncu done $SECONDS s"
fields() { grep -o '"step_ms":[0-9.]*\|"peak_mem_gib":[0-9.]*\|"loss":[0-9.]*' $1 | tr '\n' ' '; }
for v in base new; do
  bin=$BASE; [ $v = new ] && bin=$B/seqpar
  timeout 100 $bin bench train --preset llama-3.2-1b --seq-lens 65536 --steps 4 --attn-implementation flash_attention_2 \
    --tiled-loss-tokens 4096 --activation-checkpointing --out $OUT/train_$v.jsonl > $OUT/train_$v.log 2>&1
  echo "train 1B 64K flash $v rc=$?: $(fields $OUT/train_$v.jsonl)"
done
t=$SECONDS
timeout $((585 - SECONDS)) $B/test_cuda --gtest_filter='CudaOpHarness.EveryOpOnEveryCudaPath:CudaOpHarness.LayerNorm*:CudaModel.*:CudaTrain.*' > $OUT/test_cuda.log 2>&1
echo "test_cuda rc=$? $((SECONDS - t)) s"
grep -E "^\[  (PASSED|FAILED) |FAILED  \]|tests ran|Failure" $OUT/test_cuda.log | head -30
echo "ok: $(grep -c -E '^\[       OK \]' $OUT/test_cuda.log)"; tail -2 $OUT/test_cuda.log
