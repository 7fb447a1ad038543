#!/usr/bin/env python3
"""PyTorch peer of `seqpar bench attention`: times torch.nn.functional.scaled_dot_product_attention
with the flash and cuDNN backends on the same shapes and prints the same JSON lines (impl
"torch_sdpa_flash" / "torch_sdpa_cudnn").

One sequence of S tokens, H query heads, Hkv KV heads, head dim D, bf16, causal by default;
forward ("fwd") and forward + backward ("fwd_bwd"). FLOPs as in src/cli/bench_attention.h:
forward 4 S^2 H D (halved when causal), backward 2.5x the forward.

    python3 bench/peers/torch_sdpa.py [--seq-lens 4096,16384,65536] [--head-dims 64,128] [--heads 32]
"""
import argparse
import contextlib
import datetime
import json
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

# "auto": no restriction, torch's own choice (what Hugging Face's attn_implementation "sdpa" gets).
BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION, "auto": None}


def ints(s):
    return [int(x) for x in s.split(",") if x]


def operand(heads, S, D, layout, grad):
    """[1, heads, S, D] as SDPA takes it: contiguous ("bhsd"), or a transposed view of a token-major
    [1, S, heads, D] tensor ("bshd": what a Hugging Face attention layer passes, and seqpar's layout).
    Random values in [-1, 1), never zeros."""
    if layout == "bshd":
        t = (torch.rand(1, S, heads, D, device="cuda", dtype=torch.bfloat16) * 2 - 1).requires_grad_(grad)
        return t, t.transpose(1, 2)
    t = (torch.rand(1, heads, S, D, device="cuda", dtype=torch.bfloat16) * 2 - 1).requires_grad_(grad)
    return t, t


def time_one(backend, S, H, Hkv, D, causal, with_bwd, warmup, iters, layout="bhsd"):
    (q0, q), (k0, k), (v0, v) = (operand(h, S, D, layout, with_bwd) for h in (H, Hkv, Hkv))
    _, dout = operand(H, S, D, layout, False)
    gqa = Hkv != H

    def step():
        with contextlib.nullcontext() if BACKENDS[backend] is None else sdpa_kernel(BACKENDS[backend]):
            out = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)
        if with_bwd:
            out.backward(dout)
            q0.grad = k0.grad = v0.grad = None

    for _ in range(warmup):
        step()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    stops = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for i in range(iters):
        starts[i].record()
        step()
        stops[i].record()
    torch.cuda.synchronize()
    ms = sorted(a.elapsed_time(b) for a, b in zip(starts, stops))
    return statistics.median(ms), ms[0]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seq-lens", default="4096,16384,65536")
    p.add_argument("--head-dims", default="64,128")
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--kv-heads", type=int, default=0, help="0: same as --heads")
    p.add_argument("--causal", type=int, default=1)
    p.add_argument("--passes", default="fwd,fwd_bwd")
    p.add_argument("--backends", default="flash,cudnn")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--layout", default="bhsd", choices=["bhsd", "bshd"],
                   help="bhsd: contiguous [1,H,S,D]; bshd: token-major [1,S,H,D] transposed (HF's and seqpar's)")
    p.add_argument("--out", help="also write the JSON lines here")
    args = p.parse_args()
    if not torch.cuda.is_available():
        sys.exit("torch_sdpa.py: no CUDA device")
    H = args.heads
    Hkv = args.kv_heads or H
    passes = args.passes.split(",")
    causal = bool(args.causal)
    out = open(args.out, "a") if args.out else None
    for D in ints(args.head_dims):
        for S in ints(args.seq_lens):
            fwd_flops = 4.0 * S * S * H * D * (0.5 if causal else 1.0)
            for backend in args.backends.split(","):
                for pas in ("fwd", "fwd_bwd"):
                    if pas not in passes:
                        continue
                    with_bwd = pas == "fwd_bwd"
                    line = dict(bench="attention", impl=f"torch_sdpa_{backend}", S=S, H=H, Hkv=Hkv, D=D,
                                causal=causal, dtype="bf16", layout=args.layout)
                    line["pass"] = pas
                    try:
                        med, best = time_one(backend, S, H, Hkv, D, causal, with_bwd, args.warmup, args.iters,
                                             args.layout)
                        flops = fwd_flops * (3.5 if with_bwd else 1.0)
                        line.update(ms=med, ms_min=best, tflops=flops / (med * 1e-3) / 1e12)
                    except RuntimeError as e:  # a backend that refuses the shape
                        line.update(error=str(e).splitlines()[0][:200])
                    line.update(iters=args.iters, device=torch.cuda.get_device_name(),
                                torch=torch.__version__, date=datetime.date.today().isoformat())
                    text = json.dumps(line)
                    print(text, flush=True)
                    if out:
                        out.write(text + "\n")
                    torch.cuda.empty_cache()
    if out:
        out.close()


if __name__ == "__main__":
    main()
