#!/usr/bin/env python3
"""The peer of `seqpar bench host-adamw`: the CPU optimizer step of an offloaded optimizer, per
thread count, over one flat f32 tensor of --params elements (weights, gradients, moments in host
memory), as DeepSpeed's ZeRO-Offload hands its partition to DeepSpeedCPUAdam (adamw_mode, f32
states; "impl": "deepspeed_cpu_adam", JIT-built on first use) and as torch.optim.AdamW(fused=True)
runs on the CPU ("impl": "torch_fused_adamw"). Each thread count runs in a child process with
OMP_NUM_THREADS (both use OpenMP through torch's runtime). DeepSpeed's step writes no 16-bit copy
(ZeRO copies the f32 partition to the GPU and casts there), so it moves 28 bytes an element to
seqpar's 30; the lines report the same 30-byte rate for comparability and say so in "note".

    python3 bench/peers/cpu_adam_step.py --params 1073741824 --threads 1,4,16 --steps 5 --out results.jsonl
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time


def child(args):
    import torch
    torch.set_num_threads(args.child_threads)
    n = args.params
    torch.manual_seed(0)
    p = (torch.rand(n, dtype=torch.float32) * 0.04 - 0.02).requires_grad_(False)
    p.grad = torch.rand(n, dtype=torch.float32) * 2e-3 - 1e-3
    line = {"bench": "host_adamw", "impl": args.impl, "params": n, "threads": args.child_threads,
            "cores": os.cpu_count()}
    try:
        if args.impl == "deepspeed_cpu_adam":
            from deepspeed.ops.adam import DeepSpeedCPUAdam
            opt = DeepSpeedCPUAdam([p], lr=1e-5, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, adamw_mode=True)
        else:
            opt = torch.optim.AdamW([p], lr=1e-5, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, fused=True)
        ms = []
        for s in range(args.steps + 1):
            t0 = time.perf_counter()
            opt.step()
            dt = (time.perf_counter() - t0) * 1e3
            if s > 0:  # the first allocates the moments (and builds the op)
                ms.append(dt)
        med = statistics.median(ms)
        elems = n / (med / 1e3)
        line.update({"ms": med, "gelem_per_s": elems / 1e9, "gb_per_s": 30.0 * elems / 1e9,
                     "ms_per_billion": med * 1e9 / n,
                     "note": "no 16-bit copy written (28 bytes an element moved; gb_per_s at 30 as seqpar's)"})
    except Exception as e:  # noqa: BLE001 — the line says what failed and the run goes on
        line["error"] = f"{type(e).__name__}: {e}"[:300]
    line["date"] = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    print(json.dumps(line), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--params", type=int, default=1 << 30)
    ap.add_argument("--threads", default="1,4,all", help='comma-separated thread counts; "all" = every core')
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--impls", default="deepspeed_cpu_adam,torch_fused_adamw")
    ap.add_argument("--out", default="")
    ap.add_argument("--impl", help=argparse.SUPPRESS)
    ap.add_argument("--child-threads", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.impl:
        return child(args)
    threads = [os.cpu_count() if t == "all" else int(t) for t in args.threads.split(",")]
    for impl in args.impls.split(","):
        for t in threads:
            env = dict(os.environ, OMP_NUM_THREADS=str(t))
            r = subprocess.run([sys.executable, __file__, "--impl", impl, "--child-threads", str(t), "--params",
                                str(args.params), "--steps", str(args.steps)], env=env, capture_output=True, text=True)
            lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
            if not lines:
                lines = [json.dumps({"bench": "host_adamw", "impl": impl, "threads": t,
                                     "error": f"rc={r.returncode}: {r.stderr.strip()[-300:]}"})]
            for ln in lines:
                print(ln, flush=True)
                if args.out:
                    with open(args.out, "a") as f:
                        f.write(ln + "\n")


if __name__ == "__main__":
    sys.exit(main())
