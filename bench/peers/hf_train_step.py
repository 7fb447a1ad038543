#!/usr/bin/env python3
"""Hugging Face transformers peer of `seqpar bench train`: training steps of a Llama-3.2-1B/3B or
Llama-3.1-8B sized LlamaForCausalLM, a Qwen2.5-1.5B / Qwen3-1.7B sized Qwen2/Qwen3ForCausalLM, or a GPT-2-style GPT2LMHeadModel of Megatron-DeepSpeed's
1.3B / 30B sequence-parallel shapes (presets gpt-*, as seqpar's: learned positions, LayerNorm,
gelu_new, biases, tied embeddings, vocab 50304), random weights, on synthetic tokens, one GPU, as HF Trainer
runs it with bf16=True: f32 weights, bf16 autocast, torch AdamW (fused), grad-norm clipping at 1.0,
optionally gradient checkpointing. Prints the same JSON lines as seqpar (impl "hf"): median step
time (the first step excluded), tokens/s and TFLOP/s per GPU (the same FLOP formula), and
torch.cuda.max_memory_allocated; or "error" (e.g. out of memory) and goes on with the next length.

    python3 bench/peers/hf_train_step.py --preset llama-3.2-1b --seq-lens 8192,16384,32768
        [--gradient-checkpointing] [--attn sdpa|flash_attention_2] [--steps 4] [--out FILE]

Memory is not like for like: HF keeps f32 weights and grads (16 bytes per parameter with the
moments), seqpar bf16 weights, f32 grads, moments and master weights (18 bytes per parameter).
"""
import argparse
import datetime
import json
import statistics
import sys
import time

import torch

PRESETS = {  # config.json of each model (rope scaling left out: it changes no cost)
    "llama-3.2-1b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
                         num_key_value_heads=8, head_dim=64, tie_word_embeddings=True),
    "llama-3.2-3b": dict(hidden_size=3072, intermediate_size=8192, num_hidden_layers=28, num_attention_heads=24,
                         num_key_value_heads=8, head_dim=128, tie_word_embeddings=True),
    "llama-3.1-8b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                         num_key_value_heads=8, head_dim=128, tie_word_embeddings=False),
    # GPT-2 style (GPT2Config's n_embd, n_layer, n_head, n_inner; head_dim = n_embd / n_head).
    "gpt-1.3b-32k": dict(family="gpt2", hidden_size=2048, intermediate_size=8192, num_hidden_layers=24,
                         num_attention_heads=16, num_key_value_heads=16, head_dim=128, vocab_size=50304,
                         n_positions=32768),
    "gpt-1.3b-128k": dict(family="gpt2", hidden_size=2048, intermediate_size=8192, num_hidden_layers=24,
                          num_attention_heads=16, num_key_value_heads=16, head_dim=128, vocab_size=50304,
                          n_positions=131072),
    "gpt-30b-32k": dict(family="gpt2", hidden_size=6144, intermediate_size=24576, num_hidden_layers=64,
                        num_attention_heads=64, num_key_value_heads=64, head_dim=96, vocab_size=50304,
                        n_positions=32768),
    "gpt-tiny": dict(family="gpt2", hidden_size=256, intermediate_size=1024, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=4, head_dim=64, vocab_size=1024, n_positions=4096),
    # Qwen2 (q/k/v biases) and Qwen3 (q/k RMSNorm), as seqpar's presets of the same names.
    "qwen2.5-1.5b": dict(family="qwen2", vocab_size=151936, hidden_size=1536, intermediate_size=8960,
                         num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2, head_dim=128,
                         tie_word_embeddings=True, rms_norm_eps=1e-6, rope_theta=1000000.0, use_sliding_window=False),
    "qwen3-1.7b": dict(family="qwen3", vocab_size=151936, hidden_size=2048, intermediate_size=6144,
                       num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8, head_dim=128,
                       tie_word_embeddings=True, rms_norm_eps=1e-6, rope_theta=1000000.0),
    "tiny": dict(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=64, tie_word_embeddings=False, vocab_size=1024),
}


def decoder_classes(family):
    """transformers' config class, causal-LM class and modeling module of a decoder family."""
    import importlib
    name = {"llama": "Llama", "qwen2": "Qwen2", "qwen3": "Qwen3", "mistral": "Mistral"}[family]
    module = importlib.import_module(f"transformers.models.{family}.modeling_{family}")
    import transformers
    return getattr(transformers, name + "Config"), getattr(transformers, name + "ForCausalLM"), module, name


def step_flops(cfg, seq_len, sequences):
    """src/cli/bench_train.h's formula."""
    C, F = cfg["hidden_size"], cfg["intermediate_size"]
    HD = cfg["num_attention_heads"] * cfg["head_dim"]
    KD = cfg["num_key_value_heads"] * cfg["head_dim"]
    mlp_mats = 2 if cfg.get("family") == "gpt2" else 3  # up, down (GELU) | gate, up, down (SwiGLU)
    per_layer = C * HD * 2 + C * KD * 2 + mlp_mats * C * F + 2 * C
    params = cfg["num_hidden_layers"] * per_layer + C + cfg["vocab_size"] * C
    tokens = seq_len * sequences
    attention = cfg["num_hidden_layers"] * 3.5 * 2 * seq_len * seq_len * HD * sequences
    return 6 * params * tokens + attention


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="llama-3.2-1b", choices=sorted(PRESETS))
    p.add_argument("--seq-lens", default="8192")
    p.add_argument("--micro-batch", type=int, default=1)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--gradient-checkpointing", action="store_true")
    p.add_argument("--attn", default="sdpa", help="attn_implementation: sdpa | flash_attention_2 | eager")
    p.add_argument("--out", help="also append the JSON lines here")
    args = p.parse_args()
    if not torch.cuda.is_available():
        sys.exit("hf_train_step.py: no CUDA device")
    import transformers
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = dict(vocab_size=128256, rms_norm_eps=1e-5, rope_theta=500000.0, max_position_embeddings=1 << 22)
    cfg.update(PRESETS[args.preset])

    def make_model():
        if cfg.get("family", "llama") != "gpt2":
            config_class, model_class, _, _ = decoder_classes(cfg.get("family", "llama"))
            return model_class(config_class(**{k: v for k, v in cfg.items() if k != "family"},
                                            attn_implementation=args.attn))
        gc = GPT2Config(vocab_size=cfg["vocab_size"], n_positions=cfg["n_positions"], n_embd=cfg["hidden_size"],
                        n_layer=cfg["num_hidden_layers"], n_head=cfg["num_attention_heads"],
                        n_inner=cfg["intermediate_size"], activation_function="gelu_new", layer_norm_epsilon=1e-5,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, tie_word_embeddings=True,
                        attn_implementation=args.attn)
        return GPT2LMHeadModel(gc)
    out = open(args.out, "a") if args.out else None
    for S in [int(x) for x in args.seq_lens.split(",") if x]:
        line = dict(bench="train", impl="hf", model=args.preset, seq_len=S, micro_batch=args.micro_batch, sp=1,
                    dp=1, activation_checkpointing=args.gradient_checkpointing, attn=args.attn, device="cuda:0",
                    torch=torch.__version__, transformers=transformers.__version__)
        model = opt = None
        try:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
            model = make_model().cuda()
            if args.gradient_checkpointing:
                model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            model.train()
            opt = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=True)
            g = torch.Generator(device="cuda").manual_seed(S)
            times, loss = [], None
            for _ in range(args.steps):
                ids = torch.randint(0, cfg["vocab_size"], (args.micro_batch, S), device="cuda", generator=g)
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    loss = model(input_ids=ids, labels=ids).loss
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                opt.zero_grad(set_to_none=True)
                torch.cuda.synchronize()
                times.append(time.perf_counter() - t0)
            secs = statistics.median(times[1:])
            line.update(step_ms=secs * 1e3, tokens_per_s_per_gpu=S * args.micro_batch / secs,
                        tflops_per_gpu=step_flops(cfg, S, args.micro_batch) / secs / 1e12,
                        peak_mem_gib=torch.cuda.max_memory_allocated() / 2**30, loss=float(loss))
        except (RuntimeError, torch.cuda.OutOfMemoryError) as e:
            line.update(error=str(e).splitlines()[0][:300])
        del model, opt
        torch.cuda.empty_cache()
        line["date"] = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        text = json.dumps(line)
        print(text, flush=True)
        if out:
            out.write(text + "\n")


if __name__ == "__main__":
    main()
