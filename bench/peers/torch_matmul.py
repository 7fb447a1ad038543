#!/usr/bin/env python3
"""PyTorch peer of `seqpar-diag gemm`: times torch.matmul (cuBLAS) on the same GEMMs and prints
the same JSON lines (impl "torch").

Row-major semantics as in seqpar's kernels/ops.h: out[M, N] = op(a) @ op(b), op(x) = x.T when
trans_x, a stored [M, K] (or [K, M]), b stored [K, N] (or [N, K]); bf16 operands and output.

    python3 bench/peers/torch_matmul.py [--preset all] [--tokens 16384] [--shapes-from seqpar.jsonl]

--shapes-from reads the shapes (name, m, n, k, trans_a, trans_b) from seqpar's JSON lines, so the
two runs time exactly the same list.
"""
import argparse
import datetime
import json
import statistics
import sys

import torch

MODELS = [("llama-1b", 2048, 8192, 32, 8, 64), ("llama-3b", 3072, 8192, 24, 8, 128)]  # C, F, H, Hkv, D


def add_linear(shapes, name, T, d_in, d_out):
    # y = x W^T (fwd), dx = dy W (dgrad), dW = dy^T x (wgrad); see bench/diag/bench_gemm.cpp
    shapes.append(dict(name=name + ".fwd", m=T, n=d_out, k=d_in, trans_a=False, trans_b=True))
    shapes.append(dict(name=name + ".dgrad", m=T, n=d_in, k=d_out, trans_a=False, trans_b=False))
    shapes.append(dict(name=name + ".wgrad", m=d_out, n=d_in, k=T, trans_a=True, trans_b=False))


def preset_shapes(preset, tokens, square):
    shapes = []
    if preset in ("square", "all"):
        shapes.append(dict(name=f"square.{square}", m=square, n=square, k=square, trans_a=False, trans_b=False))
    for name, C, F, H, Hkv, D in MODELS:
        if preset not in (name, "all"):
            continue
        add_linear(shapes, name + ".q", tokens, C, H * D)
        add_linear(shapes, name + ".k", tokens, C, Hkv * D)
        add_linear(shapes, name + ".v", tokens, C, Hkv * D)
        add_linear(shapes, name + ".o", tokens, H * D, C)
        add_linear(shapes, name + ".gate", tokens, C, F)
        add_linear(shapes, name + ".up", tokens, C, F)
        add_linear(shapes, name + ".down", tokens, F, C)
    return shapes


def time_gemm(s, warmup, iters):
    m, n, k = s["m"], s["n"], s["k"]
    # random operands, never zeros
    a = torch.rand((k, m) if s["trans_a"] else (m, k), device="cuda", dtype=torch.bfloat16) * 2 - 1
    b = torch.rand((n, k) if s["trans_b"] else (k, n), device="cuda", dtype=torch.bfloat16) * 2 - 1
    opa = a.t() if s["trans_a"] else a
    opb = b.t() if s["trans_b"] else b
    out = torch.empty((m, n), device="cuda", dtype=torch.bfloat16)
    for _ in range(warmup):
        torch.matmul(opa, opb, out=out)
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    stops = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for i in range(iters):
        starts[i].record()
        torch.matmul(opa, opb, out=out)
        stops[i].record()
    torch.cuda.synchronize()
    ms = sorted(st.elapsed_time(sp) for st, sp in zip(starts, stops))
    return statistics.median(ms), ms[0]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="all", choices=["square", "llama-1b", "llama-3b", "all"])
    p.add_argument("--tokens", type=int, default=16384)
    p.add_argument("--square", type=int, default=8192)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--iters", type=int, default=30)
    p.add_argument("--shapes-from", help="seqpar JSON lines whose shapes to time")
    p.add_argument("--out", help="also write (append) the JSON lines here")
    p.add_argument("--strict", action="store_true",
                   help="forbid cuBLAS reduced-precision (bf16) split-K reductions, i.e. f32 accumulation "
                        "throughout as in seqpar; the default is torch's own setting")
    args = p.parse_args()
    if not torch.cuda.is_available():
        sys.exit("torch_matmul.py: no CUDA device")
    if args.shapes_from:
        with open(args.shapes_from) as f:
            shapes = [json.loads(line) for line in f if line.strip()]
    else:
        shapes = preset_shapes(args.preset, args.tokens, args.square)
    if args.strict:
        torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    variant = "strict" if args.strict else "default"
    out = open(args.out, "a") if args.out else None
    for s in shapes:
        med, best = time_gemm(s, args.warmup, args.iters)
        flops = 2.0 * s["m"] * s["n"] * s["k"]
        line = json.dumps(dict(bench="gemm", impl="torch", variant=variant, name=s["name"], m=s["m"], n=s["n"], k=s["k"],
                               trans_a=s["trans_a"], trans_b=s["trans_b"], dtype="bf16", out_dtype="bf16",
                               ms=med, ms_min=best, tflops=flops / (med * 1e-3) / 1e12, iters=args.iters,
                               device=torch.cuda.get_device_name(), torch=torch.__version__,
                               date=datetime.date.today().isoformat()))
        print(line, flush=True)
        if out:
            out.write(line + "\n")


if __name__ == "__main__":
    main()
