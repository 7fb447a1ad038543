#!/usr/bin/env bash
# Issue 7 in one call on a machine with several GPUs (nvidia-h200-x2/-x4/-x8): every SP mode over
# NCCL against one GPU, attention scaling beside PyTorch context parallelism, NCCL bandwidth, and a
# failure drill. Everything a run needs is built here; results go to OUT_DIR:
#   build.log           configure and build
#   correctness.log     seqpar fwdbwd over NCCL (seqpar launch, one process per GPU) for ulysses, ring
#                       zigzag and every hybrid u x r, MHA and GQA (P > KV heads), fixed / variable /
#                       packed batches, each against the single-GPU result: worst relative error
#   sp_attention.jsonl  seqpar bench sp-attention per mode, then bench/peers/torch_cp.py, same shapes;
#                       then seqpar bench train (Llama-3.2-1B sized, sequence over all GPUs)
#   drill.log           a 2-process training run with one rank killed mid-run: how long the job took
#                       to end, which rank it named, processes left behind
#   summary.txt         the tables
#
#   tools/multi_gpu_check.sh OUT_DIR        (MULTI_GPU_BUDGET seconds, default 570)
set -uo pipefail
OUT=${1:?usage: tools/multi_gpu_check.sh OUT_DIR}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
cd "$(dirname "$0")/.."
BUDGET=${MULTI_GPU_BUDGET:-570}
BUILD=build-gpu
BIN=$BUILD/seqpar
WORK=$(mktemp -d)
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
N=$(nvidia-smi -L | wc -l)
status=()
note() { status+=("$1"); echo "== $1"; }
left() { echo $((BUDGET - SECONDS)); }

{
  date -u +%FT%TZ
  nvidia-smi topo -m
  cmake -S . -B "$BUILD" -G Ninja -DSEQPAR_CUDA=ON -DCMAKE_BUILD_TYPE=Release &&
    cmake --build "$BUILD" -j "$(nproc)" --target seqpar
} >"$OUT/build.log" 2>&1 || { note "build FAILED"; tail -20 "$OUT/build.log"; }
note "build: $SECONDS s, $N GPUs"

# ---- a model with enough heads for every factorisation (H = 16, Hkv = 4: P = 8 > Hkv), and batches
"$BIN" train --device cuda --hidden-size 1024 --intermediate-size 2048 --num-layers 2 --num-heads 16 \
  --num-kv-heads 4 --head-dim 64 --steps 1 --sp 1 --seq-len 256 --micro-batch 1 --eval-every 0 \
  --stop-at-accuracy 0 --save-dir "$WORK/ckpt" >>"$OUT/build.log" 2>&1
"$BIN" export --checkpoint "$WORK/ckpt" --out "$WORK/model" --tokenizer-from none >>"$OUT/build.log" 2>&1
# MHA twin: same sizes with Hkv = H.
"$BIN" train --device cuda --hidden-size 1024 --intermediate-size 2048 --num-layers 2 --num-heads 16 \
  --num-kv-heads 16 --head-dim 64 --steps 1 --sp 1 --seq-len 256 --micro-batch 1 --eval-every 0 \
  --stop-at-accuracy 0 --save-dir "$WORK/ckpt_mha" >>"$OUT/build.log" 2>&1
"$BIN" export --checkpoint "$WORK/ckpt_mha" --out "$WORK/model_mha" --tokenizer-from none >>"$OUT/build.log" 2>&1

python3 - "$WORK" <<'EOF'
# input_ids / labels [B, S] int32 safetensors, written by hand (no dependency).
import json, random, struct, sys
def save(path, tensors):
    header, blobs, off = {}, [], 0
    for name, (shape, values) in tensors.items():
        raw = struct.pack(f"<{len(values)}i", *values)
        header[name] = {"dtype": "I32", "shape": shape, "data_offsets": [off, off + len(raw)]}
        blobs.append(raw); off += len(raw)
    h = json.dumps(header).encode(); h += b" " * (-len(h) % 8)
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
rng = random.Random(7)
def batch(B, S, tails):
    ids = [rng.randrange(128) for _ in range(B * S)]
    labels = list(ids)
    for b, t in enumerate(tails):  # the last t labels of row b ignored (-100): variable lengths
        for i in range(S - t, S): labels[b * S + i] = -100
    return {"input_ids": ([B, S], ids), "labels": ([B, S], labels)}
save(f"{sys.argv[1]}/fixed.safetensors", batch(1, 4096, [0]))
save(f"{sys.argv[1]}/variable.safetensors", batch(2, 2048, [700, 0]))
save(f"{sys.argv[1]}/packed.safetensors", batch(4, 1024, [0, 300, 0, 1000]))
EOF

# ---- 1. correctness over NCCL against one GPU ----------------------------------------------------
modes=("--sp-mode ulysses" "--sp-mode ring --sp-layout zigzag")
for ((u = 2; u < N; u *= 2)); do ((N % u == 0)) && modes+=("--sp-mode hybrid --ulysses-degree $u"); done
: >"$OUT/correctness.log"
for model in model model_mha; do
  for b in fixed variable packed; do
    "$BIN" fwdbwd --device cuda --model "$WORK/$model" --input "$WORK/$b.safetensors" \
      --out "$WORK/ref_${model}_$b.safetensors" >>"$OUT/build.log" 2>&1
    for m in "${modes[@]}"; do
      ((SECONDS > BUDGET - 300)) && break 3
      tag=$(echo "$m" | tr -d ' -')
      timeout 120 "$BIN" launch --nproc-per-node "$N" --master-port 29651 -- "$BIN" fwdbwd --device cuda \
        --transport nccl --sp "$N" $m --model "$WORK/$model" --input "$WORK/$b.safetensors" \
        --out "$WORK/sp_${model}_${b}_$tag.safetensors" >>"$OUT/build.log" 2>&1
      echo "$model $b sp=$N $m rc=$? $(python3 tools/compare_safetensors.py "$WORK/ref_${model}_$b.safetensors" \
        "$WORK/sp_${model}_${b}_$tag.safetensors" 2>&1)" >>"$OUT/correctness.log"
    done
  done
done
note "correctness: $(grep -c 'worst' "$OUT/correctness.log") runs, $(grep -c 'FAIL' "$OUT/correctness.log") over the bf16 rule"

# ---- 2. attention scaling, seqpar and torch context parallelism ---------------------------------
: >"$OUT/sp_attention.jsonl"
# Ulysses twice: without the head-group pipeline (--head-groups 1) and with it (2): what it hides.
for m in "${modes[@]}" "--sp-mode ulysses --head-groups 1"; do
  ((SECONDS > BUDGET - 150)) && break
  timeout 150 "$BIN" launch --nproc-per-node "$N" --master-port 29652 -- "$BIN" bench sp-attention --sp "$N" $m \
    --tokens-per-rank 8192,32768 --kv-heads 32,8 --warmup 1 --iters 3 2>>"$OUT/build.log" \
    | sed 's/^\[rank [0-9]*\] //' | grep '^{' >>"$OUT/sp_attention.jsonl"
done
timeout 200 torchrun --nproc-per-node "$N" --master-port 29653 bench/peers/torch_cp.py --tokens-per-rank 8192,32768 \
  --kv-heads 32,8 --warmup 1 --iters 3 --check 1 >>"$OUT/sp_attention.jsonl" 2>>"$OUT/build.log"
note "scaling: $(grep -c '"impl":"seqpar"' "$OUT/sp_attention.jsonl") seqpar lines, $(grep -c torch_cp "$OUT/sp_attention.jsonl") torch_cp"
# Whole training steps of a Llama-3.2-1B sized model with the sequence over all GPUs (Ulysses), the
# memory levers on: the longest lengths seqpar trains here (lines with "error" did not fit). Profiled:
# the JSON lines carry the top ops, communication (comm.*) among them.
if ((SECONDS < BUDGET - 120)); then
  timeout 150 "$BIN" launch --nproc-per-node "$N" --master-port 29655 -- "$BIN" bench train --preset llama-3.2-1b \
    --sp "$N" --seq-lens $((N * 32768)),$((N * 131072)) --steps 3 --activation-checkpointing \
    --tiled-mlp-tokens 16384 --tiled-loss-tokens 8192 --zero-stage 1 --attn-implementation sdpa --profile \
    2>>"$OUT/build.log" \
    | sed 's/^\[rank [0-9]*\] //' | grep '^{' >>"$OUT/sp_attention.jsonl"
fi

# ---- 3. failure drill: kill the last rank of a running training job (one process per GPU) -------
if ((N < 2)); then
  echo "drill skipped: one GPU (NCCL puts no two ranks of a communicator on one GPU)" >"$OUT/drill.log"
else {
  start=$SECONDS
  "$BIN" launch --nproc-per-node "$N" --master-port 29654 -- "$BIN" train --device cuda --head-dim 64 --sp 2 \
    --steps 100000 --eval-every 0 --stop-at-accuracy 0 --log-every 50 >"$WORK/drill.out" 2>&1 &
  launcher=$!
  sleep 20
  victim=$(pgrep -f -n "seqpar train --device cuda --head-dim 64 --sp 2" || true)  # the newest: the last rank
  echo "killing rank process $victim (SIGKILL) at $((SECONDS - start)) s"
  [[ -n $victim ]] && kill -9 "$victim"
  t_kill=$SECONDS
  wait "$launcher"
  echo "launcher exit code $? after $((SECONDS - t_kill)) s"
  tail -8 "$WORK/drill.out"
  echo "processes left: $(pgrep -fc 'seqpar train --device cuda --head-dim 64' || true)"
} >"$OUT/drill.log" 2>&1
fi
note "drill: $(grep 'launcher exit' "$OUT/drill.log")"

{
  echo "multi_gpu_check $(date -u +%F), $N GPUs, $SECONDS s"
  printf '%s\n' "${status[@]}"
  cat "$OUT/correctness.log"
  grep -h '^{' "$OUT/sp_attention.jsonl" | python3 -c '
import json, sys
for l in sys.stdin:
    r = json.loads(l)
    print(r.get("impl"), r.get("mode"), "u=%s r=%s" % (r.get("ulysses"), r.get("ring")), "s=%s Hkv=%s" % (r.get("tokens_per_rank"), r.get("Hkv")),
          "groups=%s ms=%.1f eff=%s hidden=%s a2a=%s p2p=%s" % (r.get("head_groups"), r.get("ms", 0), r.get("efficiency"), r.get("hidden"), r.get("a2a_GBps"), r.get("p2p_GBps")), r.get("error", ""))'
  cat "$OUT/drill.log"
} | tee "$OUT/summary.txt"
rm -rf "$WORK"
