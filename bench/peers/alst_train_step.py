#!/usr/bin/env python3
"""The ALST recipe on transformers, the peer of `seqpar bench train` for long sequences (issue 14):
LlamaForCausalLM, or Qwen2/Qwen3ForCausalLM for the qwen presets (random weights), trained through DeepSpeed in bf16 (bf16 weights, f32 master
weights and AdamW moments), Liger kernels (RoPE, RMSNorm, SwiGLU, fused linear cross-entropy: no
[tokens, vocab] logits), DeepSpeed's TiledMLP with ceil(T / hidden) shards, non-reentrant gradient
checkpointing per layer, optionally DeepSpeed's CheckpointHiddenStatesOffload (--checkpoint-offload)
and, for 8B on one GPU, ZeRO-3 with the optimizer and the parameters offloaded to the CPU
(--zero3-offload). If DeepSpeed's CPU Adam cannot be JIT-built on the GPU machine, --torch-adam
runs torch's AdamW on the CPU instead (zero_force_ds_cpu_optimizer: false) and says so in the line.

Prints the same JSON lines as seqpar bench train and bench/peers/hf_train_step.py (impl "alst"):
median step time (the first step excluded), tokens/s and TFLOP/s per GPU (the same FLOP formula),
torch.cuda.max_memory_allocated, and the process's host peak (ru_maxrss); or "error" and goes on.

    python3 bench/peers/alst_train_step.py --preset llama-3.2-1b --seq-lens 65536,131072 [--checkpoint-offload]
    python3 bench/peers/alst_train_step.py --preset llama-3.1-8b --seq-lens 65536,262144 --zero3-offload [--torch-adam]
"""
import argparse
import datetime
import json
import math
import os
import resource
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_train_step import PRESETS, decoder_classes, step_flops  # noqa: E402  (one FLOP formula, one preset table)


def ds_config(args):
    cfg = {
        "train_micro_batch_size_per_gpu": args.micro_batch,
        "gradient_accumulation_steps": 1,
        "gradient_clipping": 1.0,
        "bf16": {"enabled": True},
        "zero_optimization": {"stage": 3 if args.zero3_offload else args.zero_stage},
        "steps_per_print": 1 << 30,
        "wall_clock_breakdown": False,
    }
    if not args.torch_adam:
        cfg["optimizer"] = {"type": "AdamW", "params": {"lr": 1e-5, "weight_decay": 0.0}}
    if args.zero3_offload:
        cfg["zero_optimization"].update({
            "offload_optimizer": {"device": "cpu", "pin_memory": True, "ratio": args.offload_ratio},
            "offload_param": {"device": "cpu", "pin_memory": True},
            "stage3_param_persistence_threshold": 0,
        })
        if args.offload_ratio < 1.0:  # ZeRO-Offload++'s partial offload: sub-groups of 1e8 elements, a
            cfg["zero_optimization"]["sub_group_size"] = 100_000_000  # fine split between GPU and host
        if args.torch_adam:
            cfg["zero_force_ds_cpu_optimizer"] = False
    return cfg


def patch_tiled_mlp(mlp_class):
    """ALST's TiledMLP over whatever MLP class the model uses (Liger's SwiGLU after its patch)."""
    from deepspeed.runtime.sequence_parallel.ulysses_sp import TiledMLP
    inner = mlp_class.forward

    def tiled_forward(self, x):
        shards = math.ceil(x.shape[1] / x.shape[2])  # ceil(T / hidden), as ALST
        params = [self.down_proj.weight, self.gate_proj.weight, self.up_proj.weight]
        return TiledMLP.apply(inner, self, x, shards, params)

    mlp_class.forward = tiled_forward


def host_peak_gib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="llama-3.2-1b", choices=sorted(PRESETS))
    p.add_argument("--seq-lens", default="65536")
    p.add_argument("--micro-batch", type=int, default=1)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--zero-stage", type=int, default=0, help="without --zero3-offload (one GPU: 0)")
    p.add_argument("--zero3-offload", action="store_true",
                   help="ZeRO-3 with offload_optimizer and offload_param to the CPU (8B on one GPU)")
    p.add_argument("--offload-ratio", type=float, default=1.0,
                   help="with --zero3-offload: offload_optimizer.ratio, the share of the optimizer state on the host "
                        "(DeepSpeed's partial offload, DeepSpeed's CPU Adam only); below 1 when the host cannot hold it "
                        "all (8B: DeepSpeed keeps f32 master weights, moments and gradients there, 16 bytes a parameter)")
    p.add_argument("--torch-adam", action="store_true",
                   help="torch.optim.AdamW instead of DeepSpeed's (with --zero3-offload: "
                        "zero_force_ds_cpu_optimizer false, torch's AdamW on the CPU)")
    p.add_argument("--checkpoint-offload", action="store_true", help="DeepSpeed's CheckpointHiddenStatesOffload")
    p.add_argument("--attn", default="sdpa",
                   help="attn_implementation: sdpa (default: the GPU machine has no flash-attn package) | flash_attention_2")
    p.add_argument("--out", help="also append the JSON lines here")
    p.add_argument("--check-args", action="store_true", help="parse, import, print the DeepSpeed config, exit")
    args = p.parse_args()

    import torch
    import transformers
    import deepspeed
    import liger_kernel
    import liger_kernel.transformers as liger
    family = PRESETS[args.preset].get("family", "llama")
    if family == "gpt2":
        sys.exit("alst_train_step.py: the ALST recipe is for the Llama-style decoders (Liger has no GPT-2 kernels)")
    config_class, model_class, modeling, class_prefix = decoder_classes(family)

    if args.check_args:
        print(json.dumps(dict(ds_config=ds_config(args), deepspeed=deepspeed.__version__,
                              liger_kernel=getattr(liger_kernel, "__version__", "?"))))
        return
    if not torch.cuda.is_available():
        sys.exit("alst_train_step.py: no CUDA device")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("LOCAL_RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    deepspeed.init_distributed()

    getattr(liger, "apply_liger_kernel_to_" + family)(rope=True, rms_norm=True, swiglu=True, cross_entropy=False,
                                                       fused_linear_cross_entropy=True)
    patch_tiled_mlp(getattr(modeling, class_prefix + "MLP"))  # Liger's SwiGLU MLP class by now
    from deepspeed.runtime.activation_checkpointing.offload_activations import (
        get_checkpoint_hidden_states_offloading_ctx_manager)

    cfg = dict(vocab_size=128256, rms_norm_eps=1e-5, rope_theta=500000.0, max_position_embeddings=1 << 23)
    cfg.update(PRESETS[args.preset])
    out = open(args.out, "a") if args.out else None
    for S in [int(x) for x in args.seq_lens.split(",") if x]:
        line = dict(bench="train", impl="alst", model=args.preset, seq_len=S, micro_batch=args.micro_batch, sp=1,
                    dp=1, activation_checkpointing=True, tiled_mlp="ceil(T/hidden)", liger=True,
                    checkpoint_offload=args.checkpoint_offload,
                    zero_stage=3 if args.zero3_offload else args.zero_stage,
                    offload_optimizer=args.zero3_offload, offload_param=args.zero3_offload,
                    offload_ratio=args.offload_ratio if args.zero3_offload else None,
                    optimizer="torch AdamW" if args.torch_adam else "DeepSpeed AdamW", attn=args.attn,
                    device="cuda:0", torch=torch.__version__, transformers=transformers.__version__,
                    deepspeed=deepspeed.__version__)
        engine = None
        t_setup = time.perf_counter()
        try:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
            conf = config_class(**{k: v for k, v in cfg.items() if k != "family"}, attn_implementation=args.attn)
            if args.zero3_offload:
                with deepspeed.zero.Init(config_dict_or_path=ds_config(args)):
                    model = model_class(conf)
            else:
                model = model_class(conf)
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            model.train()
            opt = torch.optim.AdamW(model.parameters(), lr=1e-5, weight_decay=0.0) if args.torch_adam else None
            engine, *_ = deepspeed.initialize(model=model, optimizer=opt, model_parameters=model.parameters(),
                                              config=ds_config(args))
            g = torch.Generator(device="cuda").manual_seed(S)
            times, loss = [], None
            print(f"alst {S} tokens: set up in {time.perf_counter() - t_setup:.1f} s", file=sys.stderr, flush=True)
            for step in range(args.steps):
                ids = torch.randint(0, cfg["vocab_size"], (args.micro_batch, S), device="cuda", generator=g)
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                ctx = (get_checkpoint_hidden_states_offloading_ctx_manager() if args.checkpoint_offload
                       else torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t))
                with ctx:
                    loss = engine(input_ids=ids, labels=ids).loss
                    engine.backward(loss)
                engine.step()
                torch.cuda.synchronize()
                times.append(time.perf_counter() - t0)
                # Progress (stderr): a command cut off by its time limit still shows the steps it ran.
                print(f"alst {S} tokens: step {step + 1}/{args.steps} {times[-1] * 1e3:.1f} ms, GPU peak "
                      f"{torch.cuda.max_memory_allocated() / 2**30:.2f} GiB", file=sys.stderr, flush=True)
            secs = statistics.median(times[1:]) if len(times) > 1 else times[0]
            line.update(step_ms=secs * 1e3, tokens_per_s_per_gpu=S * args.micro_batch / secs,
                        tflops_per_gpu=step_flops(cfg, S, args.micro_batch) / secs / 1e12,
                        peak_mem_gib=torch.cuda.max_memory_allocated() / 2**30, host_peak_gib=host_peak_gib(),
                        loss=float(loss))
        except (RuntimeError, torch.cuda.OutOfMemoryError) as e:
            line.update(error=str(e).splitlines()[0][:300], host_peak_gib=host_peak_gib())
        if engine is not None:
            engine.destroy()
        del engine
        torch.cuda.empty_cache()
        line["date"] = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        text = json.dumps(line)
        print(text, flush=True)
        if out:
            out.write(text + "\n")


if __name__ == "__main__":
    main()
