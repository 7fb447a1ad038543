#!/bin/bash
# GPU calls 1-2 (eleventh session), issue 17: one model's shape (MODEL=qwen2.5-1.5b | qwen3-1.7b) at 32K and
# 64K tokens, one sequence per step, in one call: seqpar with the ALST recipe's levers (checkpointing, tiled
# loss), seqpar with the fastest levers its plan fits (FAST: no checkpointing, tiled MLP and loss), seqpar
# checkpointing with attention kept (KEEP), the ALST recipe on transformers (Liger kernels of
# the family, DeepSpeed's TiledMLP, checkpointing, torch AdamW with f32 master weights and moments), and
# transformers with checkpointing (sdpa), as HF Trainer runs it.
#   bash bench/gpu_calls/2026-12-03_s11_qwen.sh OUT_DIR      (MODEL, SEQ, FAST from the environment)
set -u
OUT=$1
MODEL=${MODEL:-qwen2.5-1.5b}
SEQ=${SEQ:-32768,65536}
FAST=${FAST:---tiled-mlp-tokens 8192 --tiled-loss-tokens 8192}
KEEP=${KEEP:---activation-checkpointing --checkpoint-keep-attention --tiled-loss-tokens 8192}
B=build-gpu
END=${END:-570}
left() { echo $((END - SECONDS)); }
cap() { local l=$(left); [ $l -lt $1 ] && echo $l || echo $1; }
T0=$SECONDS
# The GPU machine has no utf8proc (and no package registry): its header and static library travel in
# .devtmp/utf8proc (copied from the development machine's libutf8proc-dev; position-independent).
U=$PWD/.devtmp/utf8proc
{ cmake -S . -B $B -G Ninja -DSEQPAR_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DUTF8PROC_INCLUDE_DIR=$U \
    -DUTF8PROC_LIBRARY=$U/libutf8proc.a && cmake --build $B -j 16 --target seqpar ${TARGETS:-}; } \
  > $OUT/build.log 2>&1 && echo "build ok $((SECONDS - T0)) s" || { echo "BUILD FAILED"; grep -E "error" $OUT/build.log | head -30; exit 1; }
pip install --no-index --no-deps --target /tmp/site .devtmp/whl/*.whl > $OUT/pip.log 2>&1 || tail -3 $OUT/pip.log
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH TORCH_CUDA_ARCH_LIST=9.0
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
run() {  # name budget command...
  local name=$1 budget=$2; shift 2
  local t=$SECONDS
  [ $(left) -lt 30 ] && { echo "$name: skipped (time)"; return; }
  timeout $(cap $budget) "$@" > $OUT/$name.log 2>&1
  echo "$name rc=$? $((SECONDS - t)) s"
  grep -iE "error|out of memory" $OUT/$name.log | grep -v Warning | head -3 | cut -c1-300
}
run seqpar_ckpt 90 $B/seqpar bench train --preset $MODEL --seq-lens $SEQ --activation-checkpointing \
  --tiled-loss-tokens 8192 --steps 4 --out $OUT/train.jsonl
run seqpar_fast 90 $B/seqpar bench train --preset $MODEL --seq-lens $SEQ $FAST --steps 4 --out $OUT/train.jsonl
run seqpar_keep 90 $B/seqpar bench train --preset $MODEL --seq-lens $SEQ $KEEP --steps 4 --out $OUT/train.jsonl
run alst 200 python3 bench/peers/alst_train_step.py --preset $MODEL --seq-lens $SEQ --steps 3 --torch-adam \
  --out $OUT/train.jsonl
run hf 150 python3 bench/peers/hf_train_step.py --preset $MODEL --seq-lens $SEQ --gradient-checkpointing \
  --steps 3 --out $OUT/train.jsonl
[ -n "${EXTRA:-}" ] && run extra $(left) bash -c "$EXTRA"
python3 - $OUT/train.jsonl <<'PY'
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    lev = ",".join(k for k in ("activation_checkpointing", "checkpoint_keep_attention", "gradient_checkpointing") if r.get(k))
    print(f"{r.get('impl'):8s} {r.get('model')} S={r.get('seq_len')} {lev} tiled_mlp={r.get('tiled_mlp_tokens')} "
          f"step_ms={r.get('step_ms')} tok/s={r.get('tokens_per_s_per_gpu')} tflops={r.get('tflops_per_gpu')} "
          f"peak={r.get('peak_mem_gib')} plan={r.get('plan_peak_gib')} host={r.get('host_peak_gib')} "
          f"err={str(r.get('error', ''))[:120]}")
PY
echo "total $SECONDS s"
