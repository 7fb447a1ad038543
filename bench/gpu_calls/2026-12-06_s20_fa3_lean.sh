#!/bin/bash
# The nineteenth session's pending FA3 call cut to fit a short device budget (twentieth session):
# applies bench/gpu_calls/2026-12-05_s19_fa3_schedule.patch to this tree (the device's copy), builds
# the patched tree only, and measures its flash kernel beside seqpar's cuDNN path (the patch does
# not touch it) and PyTorch's cuDNN SDPA; then the patched attention tests, then the experiment
# variants (dQ writer, ping-pong on/off) while time is left. The base flash kernel's figures are
# the nineteenth session's call 1 (H100) and bench/NOTES.md's 2026-12-02 (H200).
# Ran once (bench/NOTES.md, 2026-12-06); the patch is on main since, with its switches removed: to
# rerun it, check out the commit before "Attention: the sm_90 kernels on FlashAttention-3's schedule".
#   END=380 bash bench/gpu_calls/2026-12-06_s20_fa3_lean.sh OUT_DIR
set -u
OUT=$1
END=${END:-380}
P=bench/gpu_calls/2026-12-05_s19_fa3_schedule.patch
# (The caller may have applied it to the working tree it sends already.)
grep -q SEQPAR_EXP_DQ_WRITER src/attention/cuda/attn_bwd_sm90.cu ||
  { { patch -p1 < $P || git apply $P; } > $OUT/patch.log 2>&1 || { echo "PATCH FAILED"; tail $OUT/patch.log; exit 1; }; }
. "$(dirname "$0")/build_gpu.sh"
build_gpu $OUT seqpar test_cuda
nvidia-smi --query-gpu=name --format=csv,noheader
A="--seq-lens 16384,65536 --head-dims 64,128 --heads 32 --kv-heads 8 --warmup 1 --iters 5"
run_attn() {  # NAME LIMIT BACKEND PASSES
  [ $((SECONDS + $2)) -gt $END ] && { echo "$1: skipped (time)"; return; }
  timeout $2 $B/seqpar bench attention --backend $3 $A --passes $4 > $OUT/attn_$1.log 2>&1 || echo "bench $1 rc=$?"
  grep '"tflops"' $OUT/attn_$1.log | sed "s/^{/{\"tag\":\"$1\",/" >> $OUT/attn.jsonl
}
run_attn flash_fwd 30 flash fwd
run_attn cudnn 40 cudnn fwd,fwd_bwd
run_attn flash 40 flash fwd_bwd
timeout 50 python3 bench/peers/torch_sdpa.py --seq-lens 16384,65536 --head-dims 64,128 --heads 32 --kv-heads 8 --backends cudnn \
  --layout bshd --iters 5 --warmup 1 > $OUT/attn_torch.log 2>&1 || echo "torch sdpa rc=$?"
grep '"tflops"' $OUT/attn_torch.log | sed 's/^{/{"tag":"torch_cudnn",/' >> $OUT/attn.jsonl
table() {
python3 - $OUT/attn.jsonl <<'PY'
import json, sys
rows = {}
for l in open(sys.argv[1]):
    d = json.loads(l)
    rows.setdefault((d["D"], d["S"], d["pass"]), {})[d["tag"]] = d["tflops"]
for k in sorted(rows):
    print("D=%d S=%d %-8s" % k, "  ".join("%s %.0f" % (i, t) for i, t in rows[k].items()))
PY
}
table
t=$SECONDS; lim=$((END - SECONDS - 60)); [ $lim -gt 200 ] && lim=200
timeout $lim $B/test_cuda --gtest_filter='CudaAttentionSm90*:CudaAttention*:CudaOpHarness.EveryAttentionCaseOnEveryCudaPath:CudaSpAttention.*' > $OUT/test_attn.log 2>&1
echo "attention tests rc=$? $((SECONDS - t)) s (limit $lim)"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|Failure|^\[ RUN" $OUT/test_attn.log | tail -12
grep -B2 -A6 "Failure" $OUT/test_attn.log | head -30
SEQPAR_EXP_DQ_WRITER=1 run_attn dqw 30 flash fwd_bwd
SEQPAR_EXP_FWD_PINGPONG=0 run_attn pp0 20 flash fwd
SEQPAR_EXP_FWD_PINGPONG=1 run_attn pp1 20 flash fwd
table
echo "done $SECONDS s"
