#!/usr/bin/env python3
# python3 bench/gpu_calls/ncu_source_table.py FILE.csv: from ncu's source page of one kernel (`ncu --import REP --page
# source --csv --print-source sass`, a report taken with WarpStateStats and SourceCounters), the stall reasons summed
# over all instructions, then the 30 SASS instructions with the most warp-state samples and each one's top three.
import csv
import sys

rows = list(csv.reader(open(sys.argv[1])))
hi = next(i for i, r in enumerate(rows) if any("Source" == c for c in r))
h = rows[hi]
body = [r for r in rows[hi + 1:] if len(r) == len(h)]


def col(name):
    return next((i for i, c in enumerate(h) if c == name), None)


def num(x):
    try: return float(x.replace(",", ""))
    except Exception: return 0.0


src = col("Source")
samp = col("Warp Stall Sampling (All Samples)") or col("Warp Stall Sampling (All Cycles)")
stall_cols = [i for i, c in enumerate(h) if c.startswith("stall_") or c.startswith("Stall ")]
tot = sum(num(r[samp]) for r in body)
agg = {}
for r in body:
    for i in stall_cols:
        agg[h[i]] = agg.get(h[i], 0) + num(r[i])
print(f"total samples {tot:.0f}; by reason: " + " ".join(
    f"{k}:{100 * v / max(tot, 1):.1f}%" for k, v in sorted(agg.items(), key=lambda kv: -kv[1])[:8]))
for r in sorted(body, key=lambda r: -num(r[samp]))[:30]:
    reasons = sorted(((num(r[i]), h[i]) for i in stall_cols), reverse=True)[:3]
    rs = " ".join(f"{n}:{v:.0f}" for v, n in reasons if v > 0)
    print(f"{100 * num(r[samp]) / max(tot, 1):5.1f}% {r[src][:70]:70s} {rs}")
