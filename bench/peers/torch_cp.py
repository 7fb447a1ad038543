#!/usr/bin/env python3
"""PyTorch peer of `seqpar bench sp-attention --sp-mode ring`: times PyTorch's context parallelism
(torch.distributed.tensor.experimental.context_parallel, ring attention over SDPA) on the same
shapes and prints the same JSON lines (impl "torch_cp").

One causal sequence of S = N x tokens_per_rank tokens over the N ranks of the job (one GPU each,
NCCL), H query heads, Hkv KV heads, head dim D, bf16, forward + backward:

    torchrun --nproc-per-node N bench/peers/torch_cp.py --tokens-per-rank 8192,32768 --heads 32 \\
        --kv-heads 32,8 --head-dim 128 [--backend flash|cudnn|efficient] [--rotate allgather|alltoall] \\
        [--warmup 2 --iters 5] [--out FILE]

N = 1 works too (CP over a world of one: a single local SDPA call plus the CP dispatch overhead).
Without torchrun the script runs as a world of one.

How PyTorch runs it (torch 2.11, _context_parallel/_attention.py): context_parallel() shards the
buffers q, k, v, dout along the sequence dim (dim 2 of [1, heads, S, D]) with the head-tail load
balancer (rank r holds chunks r and 2N-1-r of 2N: seqpar's zigzag layout) when
_cp_options.enable_load_balance is on (PyTorch's default; --load-balance 0 turns it off), and
patches F.scaled_dot_product_attention so that inside the context it runs the ring: N-1 rotations
of the concatenated k, v (one all-gather of all of them with --rotate allgather, PyTorch's default,
or N-1 all-to-all permutes with alltoall), one local SDPA call per step, partial outputs merged
in f32 by log-sum-exp. The backward re-rotates k, v with the same method and always passes dk, dv
around the ring with all-to-all permutes (N steps).

Per shape, rank 0 prints one JSON line (and appends it to --out):
  ms          median over --iters of the slowest rank's wall time of forward + backward (device
              sync + barrier before every iteration, device sync after; max over ranks)
  ms_single   the same SDPA (same backend) forward + backward on the whole sequence on rank 0's
              GPU, median wall time (null when it does not fit)
  efficiency  ms_single / (N x ms): 1.0 is perfect scaling
  tflops      per GPU: 3.5 x 4 S^2 H D / 2 (causal forward x 3.5 for fwd + bwd) / ms / N
  gqa_expanded  true when k, v were repeated to H heads before CP because CP refused enable_gqa
              (the FLOPs are the same; the ring then moves H/Hkv times more k, v bytes)
A shape that fails (backend refuses it, out of memory) prints a line with "error" and the run goes
on with the next shape.
"""
import argparse
import datetime
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.experimental import context_parallel

try:  # torch >= 2.9: the implementation; experimental._attention re-exports its public names
    from torch.distributed.tensor.experimental._context_parallel import _attention as cp_impl
except ImportError:  # older torch: everything in experimental._attention
    from torch.distributed.tensor.experimental import _attention as cp_impl
from torch.nn.attention import SDPBackend, sdpa_kernel

BACKENDS = {
    "flash": SDPBackend.FLASH_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
}
ORIGINAL_SDPA = F.scaled_dot_product_attention  # context_parallel() monkey-patches F's attribute


def ints(s, flag):
    try:
        v = [int(x) for x in s.split(",") if x]
    except ValueError:
        sys.exit(f"torch_cp.py: {flag}={s!r}: expected comma-separated integers")
    if not v or any(x < 0 for x in v):
        sys.exit(f"torch_cp.py: {flag}={s!r}: expected a non-empty list of non-negative integers")
    return v


def first_line(e):
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0][:300] if text else ''}"


def restore_sdpa():
    """context_parallel() has no try/finally around its yield: an exception inside the context
    leaves F.scaled_dot_product_attention patched and the CP DTensor handlers installed. Undo that
    so the next shape (and the single-GPU reference) starts clean."""
    if F.scaled_dot_product_attention is not ORIGINAL_SDPA:
        cp_impl._disable_context_parallel_dispatcher_impl()
    if F.scaled_dot_product_attention is not ORIGINAL_SDPA:  # belt and braces
        F.scaled_dot_product_attention = ORIGINAL_SDPA


def operands(S, H, Hkv, D, seed):
    """Full-sequence q [1,H,S,D], k, v [1,Hkv,S,D], dout [1,H,S,D]: bf16 uniform in [-1, 1), the
    same on every rank (same seed, same generator)."""
    g = torch.Generator(device="cuda")
    g.manual_seed(seed)

    def rnd(h):
        return torch.rand(1, h, S, D, device="cuda", dtype=torch.bfloat16, generator=g) * 2 - 1

    return rnd(H), rnd(Hkv), rnd(Hkv), rnd(H)


def time_single(backend, S, H, Hkv, D, seed, warmup, iters):
    """Median wall ms of SDPA forward + backward on the whole sequence on this GPU. GQA as SDPA's
    enable_gqa; if the backend refuses it, k, v repeated to H heads. Returns (ms, gqa_expanded)."""
    q, k, v, dout = operands(S, H, Hkv, D, seed)
    expanded = False

    def run(k, v, gqa):
        q.requires_grad_(True)
        k.requires_grad_(True)
        v.requires_grad_(True)
        ms = []
        for i in range(warmup + iters):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            with sdpa_kernel(BACKENDS[backend]):
                out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
            out.backward(dout)
            torch.cuda.synchronize()
            if i >= warmup:
                ms.append((time.perf_counter() - t0) * 1e3)
            q.grad = k.grad = v.grad = None
            del out
        return statistics.median(ms)

    try:
        return run(k, v, Hkv != H), expanded
    except torch.OutOfMemoryError:
        raise
    except RuntimeError:
        if Hkv == H:
            raise
    # The backend refused enable_gqa: repeat k, v to H heads (same FLOPs).
    q.grad = None
    k = k.detach().repeat_interleave(H // Hkv, dim=1)
    v = v.detach().repeat_interleave(H // Hkv, dim=1)
    return run(k, v, False), True


def time_cp(mesh, backend, S, H, Hkv, D, seed, warmup, iters, expand):
    """Per-iteration wall ms (this rank) of CP SDPA forward + backward; the caller takes the max
    over ranks. expand: repeat k, v to H heads before sharding (for a CP path without GQA)."""
    q, k, v, dout = operands(S, H, Hkv, D, seed)
    if expand and Hkv != H:
        k = k.repeat_interleave(H // Hkv, dim=1)
        v = v.repeat_interleave(H // Hkv, dim=1)
    gqa = k.size(1) != H
    bufs = [q, k, v, dout]
    ms = []
    # The buffers are resized in place to this rank's (load-balanced) shard; no restore on exit.
    with context_parallel(mesh, buffers=bufs, buffer_seq_dims=[2, 2, 2, 2], no_restore_buffers=set(bufs)):
        q.requires_grad_(True)  # after sharding: resize_ is refused on tensors that require grad
        k.requires_grad_(True)
        v.requires_grad_(True)
        for i in range(warmup + iters):
            torch.cuda.synchronize()
            dist.barrier()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            with sdpa_kernel(BACKENDS[backend]):
                out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
            out.backward(dout)
            torch.cuda.synchronize()
            if i >= warmup:
                ms.append((time.perf_counter() - t0) * 1e3)
            q.grad = k.grad = v.grad = None
            del out
    return ms


def check_cp(mesh, backend, S, H, Hkv, D, seed, expand, rank):
    """Max abs difference of CP out, dq, dk, dv against single-GPU SDPA (rank 0), or None on other
    ranks. Unshards with context_parallel_unshard (which undoes the load balancer's order)."""
    q, k, v, dout = operands(S, H, Hkv, D, seed)
    if expand and Hkv != H:
        k = k.repeat_interleave(H // Hkv, dim=1)
        v = v.repeat_interleave(H // Hkv, dim=1)
    gqa = k.size(1) != H
    bufs = [q, k, v, dout]
    with context_parallel(mesh, buffers=bufs, buffer_seq_dims=[2, 2, 2, 2], no_restore_buffers=set(bufs)):
        for t in (q, k, v):
            t.requires_grad_(True)
        with sdpa_kernel(BACKENDS[backend]):
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
        out.backward(dout)
    got = cp_impl.context_parallel_unshard(mesh, [out.detach(), q.grad, k.grad, v.grad], [2, 2, 2, 2])
    del q, k, v, dout, out
    if rank != 0:
        return None
    q, k, v, dout = operands(S, H, Hkv, D, seed)
    if expand and Hkv != H:
        k = k.repeat_interleave(H // Hkv, dim=1)
        v = v.repeat_interleave(H // Hkv, dim=1)
    for t in (q, k, v):
        t.requires_grad_(True)
    with sdpa_kernel(BACKENDS[backend]):
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
    out.backward(dout)
    want = [out.detach(), q.grad, k.grad, v.grad]
    return {name: (a.float() - b.float()).abs().max().item() for name, a, b in zip(("out", "dq", "dk", "dv"), got, want)}


def all_ok(ok):
    """True on every rank when every rank succeeded (a collective, so ranks stay in step)."""
    t = torch.tensor([0 if ok else 1], device="cuda", dtype=torch.int32)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item() == 0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tokens-per-rank", default="8192,32768", help="tokens each rank holds, comma-separated")
    p.add_argument("--heads", type=int, default=32, help="H, query heads")
    p.add_argument("--kv-heads", default="32,8", help="Hkv values, comma-separated (0: = H)")
    p.add_argument("--head-dim", type=int, default=128, help="D")
    p.add_argument("--backend", default="flash", choices=sorted(BACKENDS), help="SDPA backend (CP and single)")
    p.add_argument("--rotate", default="allgather", choices=["allgather", "alltoall"],
                   help="CP k/v rotation (set_rotate_method); PyTorch's default is allgather")
    p.add_argument("--load-balance", type=int, default=1, choices=[0, 1],
                   help="CP head-tail (zigzag) load balancing for causal (PyTorch's default: 1)")
    p.add_argument("--gqa", default="auto", choices=["auto", "native", "expand"],
                   help="Hkv < H: native = enable_gqa under CP; expand = repeat k, v to H heads first; "
                        "auto = native, expand if CP refuses it")
    p.add_argument("--single", type=int, default=1, choices=[0, 1],
                   help="also time the whole sequence on rank 0's GPU (the scaling baseline)")
    p.add_argument("--check", type=int, default=0, choices=[0, 1],
                   help="also compare CP out/dq/dk/dv with single-GPU SDPA once per shape (max abs error)")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", help="also append the JSON lines to this file")
    args = p.parse_args()

    H, D = args.heads, args.head_dim
    tokens = ints(args.tokens_per_rank, "--tokens-per-rank")
    kv_heads = [h or H for h in ints(args.kv_heads, "--kv-heads")]
    if any(s == 0 or (args.load_balance and s % 2) for s in tokens):
        sys.exit(f"torch_cp.py: --tokens-per-rank={args.tokens_per_rank}: every value must be > 0, and even with "
                 "--load-balance 1 (each rank holds two equal chunks)")
    if H <= 0 or D <= 0 or any(H % h for h in kv_heads):
        sys.exit(f"torch_cp.py: --heads={H} --kv-heads={args.kv_heads} --head-dim={D}: need H, D > 0 and "
                 "H a multiple of every Hkv")
    if args.warmup < 0 or args.iters < 1:
        sys.exit(f"torch_cp.py: --warmup={args.warmup} must be >= 0 and --iters={args.iters} >= 1")
    if not torch.cuda.is_available():
        sys.exit("torch_cp.py: no CUDA device (context parallelism needs NCCL and a GPU per rank)")

    if "RANK" not in os.environ:  # plain `python3 torch_cp.py`: a world of one
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29511")
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
    rank, N = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cuda", (N,), mesh_dim_names=("cp",))

    cp_impl.set_rotate_method(args.rotate)
    cp_impl._cp_options.enable_load_balance = bool(args.load_balance)
    out_file = open(args.out, "a") if (args.out and rank == 0) else None

    for Hkv in kv_heads:
        for s in tokens:
            S = N * s
            line = dict(bench="sp_attention", impl="torch_cp", backend=args.backend, rotate=args.rotate,
                        load_balance=bool(cp_impl._cp_options.enable_load_balance), sp=N, mode="ring",
                        tokens_per_rank=s, seq_len=S, H=H, Hkv=Hkv, D=D, causal=True)
            err = None
            ms = None
            expanded = args.gqa == "expand" and Hkv != H
            # CP forward + backward (every rank).
            for attempt in range(2):
                try:
                    times = time_cp(mesh, args.backend, S, H, Hkv, D, args.seed, args.warmup, args.iters, expanded)
                    err = None
                except Exception as e:  # unsupported backend / shape, out of memory
                    restore_sdpa()
                    times, err = None, first_line(e)
                torch.cuda.empty_cache()
                if all_ok(err is None):
                    t = torch.tensor(times, device="cuda", dtype=torch.float64)
                    dist.all_reduce(t, op=dist.ReduceOp.MAX)  # per iteration, the slowest rank
                    ms = statistics.median(t.tolist())
                    break
                if err is None:
                    err = "failed on another rank"
                # auto: a refused enable_gqa under CP gets one more try with k, v expanded.
                if attempt == 0 and args.gqa == "auto" and Hkv != H and not expanded:
                    expanded = True
                    continue
                break
            line["gqa_expanded"] = expanded

            if ms is not None and args.check:
                try:
                    errs = check_cp(mesh, args.backend, S, H, Hkv, D, args.seed, expanded, rank)
                    if errs is not None:
                        line["check_max_abs_err"] = errs
                except Exception as e:
                    restore_sdpa()
                    if rank == 0:
                        line["check_error"] = first_line(e)
                torch.cuda.empty_cache()
                dist.barrier()

            # The whole sequence on rank 0's GPU; the other ranks wait at the barrier.
            single_ms, single_expanded, single_err = None, None, None
            if args.single and rank == 0:
                try:
                    single_ms, single_expanded = time_single(args.backend, S, H, Hkv, D, args.seed + 1,
                                                             args.warmup, args.iters)
                except Exception as e:  # out of memory on one GPU, or the backend refuses it
                    single_err = first_line(e)
                torch.cuda.empty_cache()
            dist.barrier()
            if rank != 0:
                continue

            if ms is None:
                line["error"] = err
            else:
                fwd_flops = 4.0 * S * S * H * D * 0.5  # causal: half of the full score matrix
                line.update(ms=ms, ms_single=single_ms,
                            efficiency=(single_ms / (N * ms)) if single_ms else None,
                            tflops=3.5 * fwd_flops / (ms * 1e-3) / 1e12 / N)
            if single_expanded:
                line["single_gqa_expanded"] = True
            if single_err:
                line["single_error"] = single_err
            line.update(iters=args.iters, convert_to_f32=bool(cp_impl._cp_options.convert_to_f32),
                        device=torch.cuda.get_device_name(), torch=torch.__version__,
                        date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))
            text = json.dumps(line)
            print(text, flush=True)
            if out_file:
                out_file.write(text + "\n")
                out_file.flush()

    if out_file:
        out_file.close()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
