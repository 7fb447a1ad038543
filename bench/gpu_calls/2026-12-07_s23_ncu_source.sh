#!/bin/bash
# Twenty-third session: where the warps of seqpar's sm_90 attention kernels wait, per SASS instruction (ncu's
# warp-state sampling with the source page), for the backward at D = 128 and 64 and the forward at D = 64
# and 128 (S = 16K, H 32 / Hkv 8, causal): the 30 instructions with the most samples, with their stall reasons.
#   bash bench/gpu_calls/2026-12-07_s23_ncu_source.sh OUT_DIR (NCU_KERNELS="bwd:128 fwd:64": only those;
#   NCU_BIN=build-x: that build's binary)
set -u
OUT=$1
. "$(dirname "$0")/build_gpu.sh"
build_gpu $OUT seqpar
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for kd in ${NCU_KERNELS:-bwd:128 bwd:64 fwd:64 fwd:128}; do
  IFS=: read k d <<< "$kd"
  timeout 120 ncu --clock-control none --section WarpStateStats --section SourceCounters -k regex:${k}_sm90 -c 1 \
    -f -o $OUT/${k}_$d ${NCU_BIN:-$B}/seqpar bench attention --backend flash --seq-lens 16384 --head-dims $d --heads 32 \
    --kv-heads 8 --passes fwd_bwd --warmup 0 --iters 1 > /dev/null 2>&1
  ncu --import $OUT/${k}_$d.ncu-rep --page source --csv --print-source sass > $OUT/${k}_$d.csv 2>&1
  rm -f $OUT/${k}_$d.ncu-rep
  echo "== $k D=$d"
  python3 - $OUT/${k}_$d.csv <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
hi = next(i for i, r in enumerate(rows) if any("Source" == c for c in r))
h = rows[hi]
body = [r for r in rows[hi + 1:] if len(r) == len(h)]
def col(name):
    return next((i for i, c in enumerate(h) if c == name), None)
src = col("Source")
samp = col("Warp Stall Sampling (All Samples)") or col("Warp Stall Sampling (All Cycles)")
stall_cols = [i for i, c in enumerate(h) if c.startswith("stall_") or c.startswith("Stall ")]
def num(x):
    try: return float(x.replace(",", ""))
    except Exception: return 0.0
tot = sum(num(r[samp]) for r in body)
print(f"columns with stalls: {len(stall_cols)}; total samples {tot:.0f}; header: {'|'.join(h)[:900]}")
for r in sorted(body, key=lambda r: -num(r[samp]))[:30]:
    reasons = sorted(((num(r[i]), h[i]) for i in stall_cols), reverse=True)[:3]
    rs = " ".join(f"{n}:{v:.0f}" for v, n in reasons if v > 0)
    print(f"{100 * num(r[samp]) / max(tot, 1):5.1f}% {r[src][:70]:70s} {rs}")
PY
done
echo "done $SECONDS s"
