#!/usr/bin/env python3
"""seqpar's cuBLASLt GEMMs against torch.matmul, alternating shape by shape and round by round.

A per-shape ratio from two separate runs (`seqpar-diag gemm`, then bench/peers/torch_matmul.py)
moves by 5-10% with the position of the shape in the run (bench/NOTES.md: torch's own 8192^3 read
710 and 836 TFLOP/s in two calls of one day). Here one `seqpar-diag gemm --serve` process times a
shape, then this process times torch.matmul on the same shape, then seqpar again, ... (--rounds
rounds of --iters runs each), so drift in clocks and temperature hits both alike. Per shape the
median over rounds of each side's median is reported, and the ratio of the two.

    python3 bench/peers/gemm_interleaved.py --seqpar-diag build-gpu/seqpar-diag [--preset all] [--tokens 16384]
        [--rounds 5] [--iters 20] [--strict] [--shapes a,b] [--out FILE]

Prints one JSON line per shape (bench "gemm_interleaved": seqpar_ms, torch_ms, ratio = torch_ms /
seqpar_ms, i.e. seqpar's speed relative to torch) and a table with the geometric mean on stderr.
"""
import argparse
import datetime
import json
import math
import statistics
import subprocess
import sys

import torch


def torch_time(m, n, k, trans_a, trans_b, iters, warmup=3):
    a = torch.rand((k, m) if trans_a else (m, k), device="cuda", dtype=torch.bfloat16) * 2 - 1
    b = torch.rand((n, k) if trans_b else (k, n), device="cuda", dtype=torch.bfloat16) * 2 - 1
    a_op = a.t() if trans_a else a
    b_op = b.t() if trans_b else b
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)

    def run():
        torch.matmul(a_op, b_op, out=out)

    for _ in range(warmup):
        run()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    stops = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for i in range(iters):
        starts[i].record()
        run()
        stops[i].record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, stops))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seqpar-diag", default="build-gpu/seqpar-diag",
                   help="the seqpar-diag binary (bench/diag/, built beside seqpar)")
    p.add_argument("--preset", default="all")
    p.add_argument("--tokens", type=int, default=16384)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--strict", action="store_true",
                   help="torch without bf16 reduced-precision split-K reductions (seqpar reduces in f32 only)")
    p.add_argument("--shapes", default="", help="only these shape names (comma-separated)")
    p.add_argument("--out", help="also append the JSON lines here")
    args = p.parse_args()
    if not torch.cuda.is_available():
        sys.exit("gemm_interleaved.py: no CUDA device")
    if args.strict:
        torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    only = set(filter(None, args.shapes.split(",")))
    server = subprocess.Popen([args.seqpar_diag, "gemm", "--serve", "--preset", args.preset, "--tokens",
                               str(args.tokens)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
    shapes = []
    for line in server.stdout:
        j = json.loads(line)
        if j.get("ready"):
            break
        shapes.append(j)

    def seqpar_time(name, iters):
        server.stdin.write(f"{name} {iters}\n")
        server.stdin.flush()
        r = json.loads(server.stdout.readline())
        if "error" in r:
            raise RuntimeError(r["error"])
        return r["ms"], r.get("config", "")

    out = open(args.out, "a") if args.out else None
    ratios = []
    print(f"{'shape':24} {'M':>6} {'N':>6} {'K':>6} {'seqpar ms':>9} {'torch ms':>9} {'ratio':>6}", file=sys.stderr)
    for s in shapes:
        name, m, n, k, ta, tb = s["shape"], s["m"], s["n"], s["k"], s["trans_a"], s["trans_b"]
        if only and name not in only:
            continue
        seqpar_time(name, 2)  # the first request tunes the shape
        sp, tt = [], []
        for _ in range(args.rounds):
            ms, config = seqpar_time(name, args.iters)
            sp.append(ms)
            tt.append(torch_time(m, n, k, ta, tb, args.iters))
        s_ms, t_ms = statistics.median(sp), statistics.median(tt)
        flops = 2.0 * m * n * k
        line = dict(bench="gemm_interleaved", name=name, m=m, n=n, k=k, trans_a=ta, trans_b=tb, seqpar_ms=s_ms,
                    torch_ms=t_ms, seqpar_tflops=flops / (s_ms * 1e-3) / 1e12, torch_tflops=flops / (t_ms * 1e-3) / 1e12,
                    ratio=t_ms / s_ms, torch_variant="strict" if args.strict else "default", rounds=args.rounds, iters=args.iters, config=config,
                    device=torch.cuda.get_device_name(), torch=torch.__version__,
                    date=datetime.date.today().isoformat())
        ratios.append(line["ratio"])
        print(json.dumps(line), flush=True)
        if out:
            out.write(json.dumps(line) + "\n")
        print(f"{name:24} {m:6} {n:6} {k:6} {s_ms:9.3f} {t_ms:9.3f} {line['ratio']:6.2f}", file=sys.stderr)
    server.stdin.write("quit\n")
    server.stdin.close()
    server.wait()
    if ratios:
        geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        below = sum(r < 0.95 for r in ratios)
        print(f"seqpar/torch (interleaved): geometric mean {geo:.3f}, min {min(ratios):.3f}, max {max(ratios):.3f}, "
              f"{below} of {len(ratios)} below 0.95", file=sys.stderr)


if __name__ == "__main__":
    main()
