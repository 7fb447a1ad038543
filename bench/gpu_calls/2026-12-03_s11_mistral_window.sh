#!/bin/bash
# Issue 17: a Mistral-shaped model (mistral-7b's layers: hidden 4096, 32/8 heads, head_dim 128, FFN 14336,
# vocab 32000; 8 of its 32 layers so that it fits one GPU without offload) at 64K tokens, with its sliding
# window W = 4096 and with full causal attention (--sliding-window 0), each with the op profile: attention's
# share of the step with and without the window. Runs after 2026-12-03_s11_qwen.sh (its build, $B, $OUT).
B=${B:-build-gpu}
OUT=$1
for W in 4096 0; do
  timeout 150 $B/seqpar bench train --preset mistral-7b --layers 8 --sliding-window $W --seq-lens 65536 \
    --activation-checkpointing --tiled-loss-tokens 8192 --steps 3 --profile --out $OUT/mistral.jsonl \
    > $OUT/mistral_w$W.log 2>&1
  echo "mistral W=$W rc=$?"
done
python3 - $OUT/mistral.jsonl <<'PY'
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    prof = r.get("profile", [])
    wall = sum(e["ms"] for e in prof) + r.get("profile_outside_ms", 0)
    attn = sum(e["ms"] for e in prof if e["op"].startswith("attn_"))
    print(f"mistral-shaped layers={r.get('layers')} W={r.get('sliding_window')} S={r.get('seq_len')} "
          f"step_ms={r.get('step_ms')} tok/s={r.get('tokens_per_s_per_gpu')} peak={r.get('peak_mem_gib')} "
          f"attention {attn:.0f} ms of {wall:.0f} ms profiled = {100 * attn / max(wall, 1e-9):.1f}% "
          f"err={str(r.get('error', ''))[:120]}")
PY
