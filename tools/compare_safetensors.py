#!/usr/bin/env python3
"""Compares two safetensors files of `seqpar fwdbwd` outputs (a reference and a candidate) with the
bf16 rule of tests/cuda/test_cuda_model.cpp: relative L2 error <= 2e-2 for logits and loss, <= 6e-2
for gradients and parameters. Prints the worst tensor and "FAIL ..." for each one over its rule.
Standard library only (numpy, when installed, makes it fast).

    python3 tools/compare_safetensors.py REF.safetensors GOT.safetensors
"""
import array
import json
import math
import struct
import sys

FORMATS = {"F32": "f", "F64": "d", "I32": "i", "I64": "q"}


def load(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        begin, end = meta["data_offsets"]
        raw = data[begin:end]
        if meta["dtype"] == "BF16":
            a = array.array("f", struct.unpack(f"<{len(raw) // 2}f",
                                               b"".join(b"\0\0" + raw[i:i + 2] for i in range(0, len(raw), 2))))
        else:
            a = array.array(FORMATS[meta["dtype"]])
            a.frombytes(raw)
        out[name] = a
    return out


def rel_l2(ref, got):
    try:
        import numpy as np
        r, g = np.asarray(ref, dtype=np.float64), np.asarray(got, dtype=np.float64)
        num, den = float(((g - r) ** 2).sum()), float((r ** 2).sum())
    except ImportError:
        num = sum((float(g) - float(r)) ** 2 for r, g in zip(ref, got))
        den = sum(float(r) ** 2 for r in ref)
    return math.sqrt(num / den) if den > 0 else math.sqrt(num)


def main():
    ref, got = load(sys.argv[1]), load(sys.argv[2])
    worst, worst_name, failures = 0.0, "", []
    for name, r in ref.items():
        if name not in got:
            failures.append(f"FAIL {name}: missing")
            continue
        if len(got[name]) != len(r):
            failures.append(f"FAIL {name}: {len(got[name])} elements, expected {len(r)}")
            continue
        e = rel_l2(r, got[name])
        rule = 2e-2 if name in ("logits", "loss") else 6e-2
        if not e <= rule:
            failures.append(f"FAIL {name}: {e:.3g} > {rule}")
        if e > worst or math.isnan(e):
            worst, worst_name = e, name
    print(f"worst {worst:.3g} ({worst_name}) over {len(ref)} tensors" + ("; " + "; ".join(failures) if failures else ""))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
