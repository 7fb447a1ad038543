#!/usr/bin/env python3
# Rerun: python3 tools/make_hf_fixtures.py [--out tests/fixtures/hf] [--verify]   (CPU torch + transformers)
"""Hugging Face reference fixtures for `seqpar fwdbwd` (checked by tests/cli/test_fwdbwd_hf.cpp).

For each case below this builds a small random checkpoint of its family with transformers
(LlamaForCausalLM; Qwen2ForCausalLM, Qwen3ForCausalLM, MistralForCausalLM for the cases with a
`family`: q/k/v biases, q/k norms, explicit head_dim, sliding windows) and writes
tests/fixtures/hf/<case>/:

  config.json, model.safetensors   model.save_pretrained (f32 weights; bf16 for `bf16_weights`)
  input.safetensors                input_ids [B, S] i32, labels [B, S] i32 (HF convention:
                                   unshifted, -100 = ignore; row 0 has its first 40% masked);
                                   the cases with `docs` also position_ids [B, S] i32: packed
                                   documents as HF packs them (DataCollatorWithFlattening: each
                                   document counts 0, 1, ...; its first label -100), the reference
                                   running each document on its own
  expected.safetensors             logits [B, S, V], loss [1], grad.<name> for every parameter of
                                   named_parameters(), grad_norm [1] (clip_grad_norm_'s return
                                   value: the norm before clipping), param.<name> after
                                   clip_grad_norm_(clip) and one torch.optim.AdamW step; all f32
  meta.json                        the optimizer settings, the versions used, a description

The reference is computed in float64: the checkpoint is loaded back from the written files by
LlamaForCausalLM.from_pretrained(dtype=float64, attn_implementation="sdpa") (so a bf16 checkpoint
is used as its bf16 values upcast), and the three places where transformers forces float32
(RMSNorm's upcast, the RoPE cos/sin, the loss's logits.float()) are kept in float64; the loss is
mean cross-entropy over the shifted, non-ignored labels of the whole batch, as HF computes it
(checked against HF's own `model(input_ids, labels=labels).loss`). RoPE's inv_freq keeps the
values transformers computes (f32 pow), and the float64 rotary forward keeps transformers'
dynamic_rope_update, so the rope_scaling cases (linear, dynamic, yarn, longrope) use the
frequencies of this batch's length (max(position_ids) + 1 = S) and attention_scaling as HF does.

Deterministic: every weight and token comes from a torch.Generator seeded per case, never from
transformers' initializers, and torch runs on one thread; rerunning with the same versions
reproduces the same bytes. --verify then re-checks every fixture from its files: a float32
recomputation passes the C++ test's tolerances, configs with a wrong setting (rope theta, norm
eps, rope scaling) do not, and the stored loss equals a manual float64 cross-entropy
of the stored logits.
"""

import argparse
import json
import math
import os
import platform
import shutil
import sys
import types

import safetensors
import safetensors.torch
import torch
import transformers
from transformers import (LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM, Qwen2Config,
                          Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM)
from transformers.modeling_rope_utils import dynamic_rope_update

# family -> (config class, model class)
FAMILIES = {"llama": (LlamaConfig, LlamaForCausalLM), "qwen2": (Qwen2Config, Qwen2ForCausalLM),
            "qwen3": (Qwen3Config, Qwen3ForCausalLM), "mistral": (MistralConfig, MistralForCausalLM)}


def classes(case):
    return FAMILIES[case.get("family", "llama")]

# Tolerances of tests/cli/test_fwdbwd_hf.cpp: relative error ||a - b|| / ||b||.
TOL_LOOSE = 1e-4  # logits, grad.*
TOL_TIGHT = 1e-5  # loss, grad_norm, param.*

COMMON = dict(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2, max_position_embeddings=64)

# Optimizer settings. eps is of the order of the clipped gradients' elements, so that AdamW's
# first step g / (|g| + eps) depends on the gradient's scale: the clipping and eps are then seen
# in param.*, which a step-1 update lr * sign(g) would hide. weight_decay changes every
# parameter by lr * weight_decay (relative), far above the 1e-5 tolerance.
CASES = [
    dict(name="gqa_untied", seed=1001, B=2, S=16,
         config=dict(num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False, rms_norm_eps=1e-5,
                     rope_parameters=dict(rope_type="default", rope_theta=1000.0)),
         optim=dict(lr=1e-2, beta1=0.9, beta2=0.95, eps=1e-3, weight_decay=0.1, clip=0.5),
         description="GQA (H=4, Hkv=2), untied LM head, rope_theta 1000, rms_norm_eps 1e-5, "
                     "transformers 5.x config spelling (rope_parameters, dtype) as save_pretrained writes it; "
                     "f32 weights; clipping active"),
    dict(name="mha_tied", seed=1002, B=2, S=14,
         config=dict(num_attention_heads=4, num_key_value_heads=4, tie_word_embeddings=True, rms_norm_eps=1e-6,
                     rope_parameters=dict(rope_type="default", rope_theta=10000.0)),
         optim=dict(lr=2e-2, beta1=0.8, beta2=0.99, eps=2e-3, weight_decay=0.05, clip=50.0),
         description="MHA (H=Hkv=4), tie_word_embeddings=true (one tensor model.embed_tokens.weight, "
                     "no lm_head.weight in the checkpoint, one gradient for both uses); f32 weights; "
                     "clip above the gradient norm (no clipping)"),
    dict(name="gqa_llama3_rope", seed=1003, B=2, S=20,
         config=dict(num_attention_heads=4, num_key_value_heads=1, head_dim=16, tie_word_embeddings=False,
                     rms_norm_eps=1e-5,
                     rope_parameters=dict(rope_type="llama3", rope_theta=10000.0, factor=8.0, low_freq_factor=1.0,
                                          high_freq_factor=4.0, original_max_position_embeddings=8)),
         optim=dict(lr=1e-2, beta1=0.9, beta2=0.999, eps=1e-3, weight_decay=0.1, clip=0.3),
         description="GQA (H=4, Hkv=1), head_dim=16 set explicitly with hidden_size 32 (head_dim != C/H), "
                     "llama3 RoPE scaling (factor 8, low 1, high 4, original_max_position_embeddings 8: "
                     "every frequency is scaled or smoothed at these positions), 5.x spelling; clipping active"),
    dict(name="bf16_weights", seed=1004, B=2, S=16, weights_dtype="bfloat16",
         config=dict(num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False, rms_norm_eps=1e-5,
                     rope_parameters=dict(rope_type="default", rope_theta=1000.0)),
         optim=dict(lr=1e-2, beta1=0.9, beta2=0.95, eps=1e-3, weight_decay=0.1, clip=0.5),
         description="like gqa_untied, weights stored in bf16 (config dtype bfloat16); the reference uses the "
                     "bf16 values upcast to float64, expected param.* are f32"),
    dict(name="v4_spelling", seed=1005, B=2, S=12, spelling="v4",
         config=dict(num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False, rms_norm_eps=1e-5,
                     rope_parameters=dict(rope_type="default", rope_theta=500000.0)),
         optim=dict(lr=1e-2, beta1=0.9, beta2=0.95, eps=1e-3, weight_decay=0.1, clip=0.5),
         description="config.json rewritten after saving into the transformers 4.x spelling: rope_theta "
                     "500000 at top level, rope_scaling null, no rope_parameters, torch_dtype instead of dtype, "
                     "no head_dim (derived as hidden_size / num_attention_heads)"),
    dict(name="llama3_v4_spelling", seed=1006, B=2, S=14, spelling="v4",
         config=dict(num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True, rms_norm_eps=1e-5,
                     rope_parameters=dict(rope_type="llama3", rope_theta=50000.0, factor=8.0, low_freq_factor=1.0,
                                          high_freq_factor=4.0, original_max_position_embeddings=8)),
         optim=dict(lr=1e-2, beta1=0.9, beta2=0.95, eps=1e-3, weight_decay=0.1, clip=0.5),
         description="llama3 RoPE scaling in the 4.x spelling real Llama-3.1 checkpoints use: rope_theta at top "
                     "level, rope_scaling {rope_type llama3, factor 8, low 1, high 4, "
                     "original_max_position_embeddings 8}, "
                     "torch_dtype, no head_dim; tied embeddings"),
    dict(name="gqa_d64", seed=1007, B=2, S=24,
         config=dict(num_attention_heads=2, num_key_value_heads=1, head_dim=64, tie_word_embeddings=False,
                     rms_norm_eps=1e-5, rope_parameters=dict(rope_type="default", rope_theta=10000.0)),
         optim=dict(lr=1e-2, beta1=0.9, beta2=0.95, eps=1e-3, weight_decay=0.1, clip=0.5),
         description="GQA (H=2, Hkv=1) with head_dim=64, a head size the CUDA attention kernels (flash, cuDNN) "
                     "support, so the GPU tests (tests/cuda/test_cuda_model.cpp) check this case end to end"),
    dict(name="llama_packed", seed=1008, B=2, S=20, docs=[[6, 9, 5], [12, 8]],
         config=dict(num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False, rms_norm_eps=1e-5,
                     rope_parameters=dict(rope_type="default", rope_theta=1000.0)),
         optim=dict(lr=1e-2, beta1=0.9, beta2=0.95, eps=1e-3, weight_decay=0.1, clip=0.5),
         description="packed documents (position_ids as DataCollatorWithFlattening writes them): row 0 holds "
                     "documents of 6, 9 and 5 tokens (and its masked prompt), row 1 of 12 and 8; GQA"),
    # --- the families (issue 17) ---
    dict(name="qwen2_untied", family="qwen2", seed=1101, B=2, S=16,
         config=dict(num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False, rms_norm_eps=1e-6,
                     rope_parameters=dict(rope_type="default", rope_theta=1000000.0), use_sliding_window=False,
                     sliding_window=4, max_window_layers=1),
         optim=dict(lr=1e-2, beta1=0.9, beta2=0.95, eps=1e-3, weight_decay=0.1, clip=0.5),
         description="Qwen2: q/k/v biases (no o bias), GQA, untied, rope_theta 1e6; use_sliding_window=false, so "
                     "sliding_window=4 and max_window_layers=1 are ignored (full causal everywhere)"),
    dict(name="qwen2_tied_window", family="qwen2", seed=1102, B=2, S=16,
         config=dict(num_attention_heads=4, num_key_value_heads=1, tie_word_embeddings=True, rms_norm_eps=1e-6,
                     rope_parameters=dict(rope_type="default", rope_theta=10000.0), use_sliding_window=True,
                     sliding_window=5, max_window_layers=1),
         optim=dict(lr=1e-2, beta1=0.9, beta2=0.95, eps=1e-3, weight_decay=0.1, clip=0.5),
         description="Qwen2 with use_sliding_window=true, sliding_window=5 < S, max_window_layers=1: layer 0 full, "
                     "layer 1 windowed (transformers' layer_types); MQA, tied embeddings"),
    dict(name="qwen2_packed_window", family="qwen2", seed=1107, B=2, S=24, docs=[[9, 15], [4, 13, 7]],
         config=dict(num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False, rms_norm_eps=1e-6,
                     rope_parameters=dict(rope_type="default", rope_theta=10000.0), use_sliding_window=True,
                     sliding_window=5, max_window_layers=1),
         optim=dict(lr=1e-2, beta1=0.9, beta2=0.95, eps=1e-3, weight_decay=0.1, clip=0.5),
         description="Qwen2 with packed documents (position_ids) and a sliding window of 5 on layer 1: the window "
                     "counts within each document (documents of 9 and 15, and 4, 13 and 7 tokens)"),
    dict(name="qwen3_head_dim", family="qwen3", seed=1103, B=2, S=16,
         config=dict(num_attention_heads=4, num_key_value_heads=2, head_dim=16, tie_word_embeddings=False,
                     rms_norm_eps=1e-6, rope_parameters=dict(rope_type="default", rope_theta=1000000.0),
                     attention_bias=False),
         optim=dict(lr=1e-2, beta1=0.9, beta2=0.95, eps=1e-3, weight_decay=0.1, clip=0.5),
         description="Qwen3: q_norm/k_norm over head_dim before RoPE, head_dim=16 != hidden/heads=8, no biases, "
                     "untied"),
    dict(name="qwen3_bias_window", family="qwen3", seed=1104, B=2, S=14,
         config=dict(num_attention_heads=4, num_key_value_heads=4, head_dim=8, tie_word_embeddings=False,
                     rms_norm_eps=1e-6, rope_parameters=dict(rope_type="default", rope_theta=10000.0),
                     attention_bias=True, use_sliding_window=True, sliding_window=4, max_window_layers=0),
         optim=dict(lr=2e-2, beta1=0.8, beta2=0.99, eps=2e-3, weight_decay=0.05, clip=0.5),
         description="Qwen3 with attention_bias=true (q/k/v/o biases), sliding_window=4 on every layer "
                     "(max_window_layers=0), MHA, untied (tied embeddings are the qwen2 and mistral cases': with the "
                     "larger embedding std they use, a wrong rms_norm_eps would stay within tolerance here)"),
    dict(name="mistral_window", family="mistral", seed=1105, B=2, S=16,
         config=dict(num_attention_heads=4, num_key_value_heads=1, head_dim=16, tie_word_embeddings=False,
                     rms_norm_eps=1e-5, rope_parameters=dict(rope_type="default", rope_theta=10000.0),
                     sliding_window=5),
         optim=dict(lr=1e-2, beta1=0.9, beta2=0.95, eps=1e-3, weight_decay=0.1, clip=0.5),
         description="Mistral: sliding_window=5 < S=16 on every layer, MQA (H=4, Hkv=1), head_dim=16 from the "
                     "config, untied"),
    dict(name="mistral_full_tied", family="mistral", seed=1106, B=2, S=12,
         config=dict(num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True, rms_norm_eps=1e-5,
                     rope_parameters=dict(rope_type="default", rope_theta=1000000.0), sliding_window=None),
         optim=dict(lr=1e-2, beta1=0.9, beta2=0.95, eps=1e-3, weight_decay=0.1, clip=0.5),
         description="Mistral with sliding_window=null (full causal), GQA, head_dim null (hidden/heads), tied"),
    dict(name="mistral_d64_window", family="mistral", seed=1107, B=2, S=24,
         config=dict(num_attention_heads=2, num_key_value_heads=1, head_dim=64, tie_word_embeddings=False,
                     rms_norm_eps=1e-5, rope_parameters=dict(rope_type="default", rope_theta=10000.0),
                     sliding_window=7),
         optim=dict(lr=1e-2, beta1=0.9, beta2=0.95, eps=1e-3, weight_decay=0.1, clip=0.5),
         description="Mistral, head_dim=64 (a CUDA kernel head size) and sliding_window=7 < S=24: the GPU run of a "
                     "windowed model"),
    dict(name="qwen3_d64_packed", family="qwen3", seed=1110, B=2, S=24, docs=[[10, 14], [7, 17]],
         config=dict(num_attention_heads=2, num_key_value_heads=1, head_dim=64, tie_word_embeddings=False,
                     rms_norm_eps=1e-6, rope_parameters=dict(rope_type="default", rope_theta=1000000.0),
                     attention_bias=False),
         optim=dict(lr=1e-2, beta1=0.9, beta2=0.95, eps=1e-3, weight_decay=0.1, clip=0.5),
         description="Qwen3 with head_dim=64 (a CUDA kernel head size, != hidden/heads=16), GQA, untied (see qwen3_bias_window), "
                     "packed documents: the GPU run of the q/k norms and RoPE (one pass on CUDA), positions restarting "
                     "per document"),
    dict(name="qwen2_d64", family="qwen2", seed=1111, B=2, S=24,
         config=dict(num_attention_heads=2, num_key_value_heads=1, head_dim=64, tie_word_embeddings=False,
                     rms_norm_eps=1e-6, rope_parameters=dict(rope_type="default", rope_theta=1000000.0),
                     use_sliding_window=False),
         optim=dict(lr=1e-2, beta1=0.9, beta2=0.95, eps=1e-3, weight_decay=0.1, clip=0.5),
         description="Qwen2 with head_dim=64 (a CUDA kernel head size): the GPU run of the q/k/v biases"),
    # --- rope_scaling types (issue 18 item 7) ---
    dict(name="rope_linear_v4", seed=1201, B=2, S=16, spelling="v4", v4_type_key=True,
         config=dict(num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False, rms_norm_eps=1e-5,
                     rope_parameters=dict(rope_type="linear", rope_theta=10000.0, factor=4.0)),
         optim=dict(lr=1e-2, beta1=0.9, beta2=0.95, eps=1e-3, weight_decay=0.1, clip=0.5),
         description="linear RoPE scaling (factor 4: inv_freq / 4) in the older 4.x spelling: rope_theta at top "
                     "level, rope_scaling {type: linear, factor: 4} with the key 'type', torch_dtype, no head_dim"),
    dict(name="rope_dynamic", seed=1202, B=2, S=16,
         config=dict(num_attention_heads=4, num_key_value_heads=2, head_dim=16, tie_word_embeddings=False,
                     rms_norm_eps=1e-5, max_position_embeddings=8,
                     rope_parameters=dict(rope_type="dynamic", rope_theta=10000.0, factor=3.0)),
         optim=dict(lr=1e-2, beta1=0.9, beta2=0.95, eps=1e-3, weight_decay=0.1, clip=0.5),
         description="dynamic (NTK-aware) RoPE, factor 3, max_position_embeddings 8 < S=16: transformers' "
                     "dynamic_rope_update raises the base to theta * (3 * 16 / 8 - 2)^(16/14) for this batch "
                     "(seq_len = max(position_ids) + 1 = 16); head_dim 16, 5.x spelling"),
    dict(name="rope_yarn", seed=1203, B=2, S=20,
         config=dict(num_attention_heads=4, num_key_value_heads=1, head_dim=16, tie_word_embeddings=False,
                     rms_norm_eps=1e-5, max_position_embeddings=256,
                     rope_parameters=dict(rope_type="yarn", rope_theta=100.0, factor=4.0,
                                          original_max_position_embeddings=64, truncate=False)),
         optim=dict(lr=1e-2, beta1=0.9, beta2=0.95, eps=1e-3, weight_decay=0.1, clip=0.5),
         description="YaRN: factor 4, original_max_position_embeddings 64, beta_fast/slow defaults (32, 1), "
                     "truncate false (the 5.x key), theta 100 and head_dim 16 so the ramp is fractional on dims "
                     "0-4; attention_factor from get_mscale (0.1 ln 4 + 1) on cos and sin; 5.x spelling"),
    dict(name="rope_longrope", seed=1204, B=2, S=16,
         config=dict(num_attention_heads=4, num_key_value_heads=2, head_dim=16, tie_word_embeddings=False,
                     rms_norm_eps=1e-5, max_position_embeddings=64,
                     rope_parameters=dict(rope_type="longrope", rope_theta=10000.0,
                                          original_max_position_embeddings=8,
                                          short_factor=[1.0, 1.1, 1.25, 1.5, 1.8, 2.2, 2.6, 3.0],
                                          long_factor=[1.0, 1.5, 2.5, 4.0, 6.0, 9.0, 13.0, 16.0])),
         optim=dict(lr=1e-2, beta1=0.9, beta2=0.95, eps=1e-3, weight_decay=0.1, clip=0.5),
         description="LongRoPE: S=16 > original_max_position_embeddings 8, so long_factor divides the "
                     "frequencies; no factor, so attention_factor = sqrt(1 + ln(64/8) / ln 8) = sqrt(2) on cos and "
                     "sin; head_dim 16, 5.x spelling"),
]

# Initialization: N(0, std) matrices, RMSNorm weights 1 + N(0, 0.1). A small embedding std keeps
# the first RMSNorm's input variance near 1e-3, so rms_norm_eps (1e-5 vs 1e-6) shows in the
# logits; a larger LM-head std gives logits of order 1, so the softmax is far from uniform.
STD = 0.15
EMBED_STD = 0.03
LM_HEAD_STD = 0.2
NORM_JITTER = 0.1


def versions():
    return {"python": platform.python_version(), "torch": torch.__version__,
            "transformers": transformers.__version__, "safetensors": safetensors.__version__}


def init_weights(model, seed):
    gen = torch.Generator().manual_seed(seed)
    tied = model.config.tie_word_embeddings
    with torch.no_grad():
        for name, p in model.named_parameters():  # fixed order: the module tree's
            if name.endswith("norm.weight"):
                p.copy_(1.0 + NORM_JITTER * torch.randn(p.shape, generator=gen, dtype=torch.float64))
            elif name == "model.embed_tokens.weight":
                std = LM_HEAD_STD if tied else EMBED_STD
                p.copy_(std * torch.randn(p.shape, generator=gen, dtype=torch.float64))
            elif name == "lm_head.weight":
                p.copy_(LM_HEAD_STD * torch.randn(p.shape, generator=gen, dtype=torch.float64))
            else:
                p.copy_(STD * torch.randn(p.shape, generator=gen, dtype=torch.float64))


def make_inputs(case, vocab_size):
    gen = torch.Generator().manual_seed(case["seed"] + 500)
    B, S = case["B"], case["S"]
    input_ids = torch.randint(0, vocab_size, (B, S), generator=gen, dtype=torch.int64)
    labels = torch.randint(0, vocab_size, (B, S), generator=gen, dtype=torch.int64)
    labels[0, : round(0.4 * S)] = -100  # row 0: a masked prompt; row 1: every target counts
    return input_ids, labels


def packed_inputs(case, labels):
    """HF's packed position_ids of a case with `docs` (per row, its documents' lengths), with labels set to -100 at
    each document's first token (DataCollatorWithFlattening's convention); None for a case without."""
    if "docs" not in case:
        return None
    position_ids = torch.zeros(case["B"], case["S"], dtype=torch.int64)
    for b, lens in enumerate(case["docs"]):
        assert sum(lens) == case["S"], (case["name"], lens)
        at = 0
        for n in lens:
            position_ids[b, at:at + n] = torch.arange(n)
            labels[b, at] = -100
            at += n
    return position_ids


def model_logits(model, input_ids, position_ids=None):
    """The batch's logits; with packed position_ids each document runs on its own (its own positions, no attention
    across documents): the definition of packing, independent of how transformers masks a packed row."""
    if position_ids is None:
        return model(input_ids=input_ids).logits
    S = input_ids.shape[1]
    rows = []
    for b in range(input_ids.shape[0]):
        starts = (position_ids[b] == 0).nonzero().flatten().tolist() + [S]
        rows.append(torch.cat([model(input_ids=input_ids[b:b + 1, lo:hi]).logits[0]
                               for lo, hi in zip(starts, starts[1:])]))
    return torch.stack(rows)


def input_tensors(input_ids, labels, position_ids):
    t = {"input_ids": input_ids.to(torch.int32), "labels": labels.to(torch.int32)}
    if position_ids is not None:
        t["position_ids"] = position_ids.to(torch.int32)
    return t


def to_v4_spelling(config_path, type_key=False):
    with open(config_path) as f:
        cfg = json.load(f)
    rope = cfg.pop("rope_parameters")
    cfg["rope_theta"] = rope.pop("rope_theta")
    if type_key:  # the older 4.x key
        rope["type"] = rope.pop("rope_type")
    cfg["rope_scaling"] = None if rope.get("rope_type") == "default" else rope
    cfg["torch_dtype"] = cfg.pop("dtype")
    cfg.pop("head_dim")
    with open(config_path, "w") as f:
        f.write(json.dumps(dict(sorted(cfg.items())), indent=2) + "\n")


# --- float64 reference ---------------------------------------------------------------------------

def _rmsnorm_f64(self, x):  # LlamaRMSNorm.forward without its float32 upcast
    variance = x.pow(2).mean(-1, keepdim=True)
    return self.weight * (x * torch.rsqrt(variance + self.variance_epsilon))


@dynamic_rope_update  # as LlamaRotaryEmbedding.forward: dynamic / longrope pick inv_freq by the batch's length
def _rope_f64(self, x, position_ids):  # LlamaRotaryEmbedding.forward without its float32 cast
    freqs = position_ids[..., None].to(torch.float64) * self.inv_freq.to(device=x.device, dtype=torch.float64)
    emb = torch.cat((freqs, freqs), dim=-1)
    return (emb.cos() * self.attention_scaling).to(x.dtype), (emb.sin() * self.attention_scaling).to(x.dtype)


def model_class_of(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        return FAMILIES[json.load(f)["model_type"]][1]


def load_model(model_dir, dtype, config=None, f64_exact=True):
    kwargs = dict(dtype=dtype, attn_implementation="sdpa")
    if config is not None:
        kwargs["config"] = config
    model = model_class_of(model_dir).from_pretrained(model_dir, **kwargs)
    model.train()  # dropout is 0 in these configs; train() only matters for the optimizer step
    if dtype == torch.float64 and f64_exact:
        for m in model.modules():
            if type(m).__name__.endswith("RMSNorm"):  # Llama, Qwen2, Qwen3, Mistral: the same norm
                m.forward = types.MethodType(_rmsnorm_f64, m)
        rot = model.model.rotary_emb
        rot.forward = types.MethodType(_rope_f64, rot)
    return model


def causal_lm_loss(logits, labels):
    # HF: pad labels with -100, shift left, mean over the non-ignored targets of the whole batch.
    V = logits.shape[-1]
    shift = torch.nn.functional.pad(labels, (0, 1), value=-100)[:, 1:]
    return torch.nn.functional.cross_entropy(logits.reshape(-1, V), shift.reshape(-1), ignore_index=-100,
                                             reduction="mean")


def reference(model, input_ids, labels, optim, position_ids=None):
    """One forward + backward + clip + AdamW step in the model's dtype; returns f32 tensors."""
    out = {}
    logits = model_logits(model, input_ids, position_ids)
    loss = causal_lm_loss(logits, labels)
    loss.backward()
    params = list(model.named_parameters())
    out["logits"] = logits.detach().to(torch.float32, copy=True)
    out["loss"] = loss.detach().float().reshape(1)
    for name, p in params:
        out["grad." + name] = p.grad.detach().to(torch.float32, copy=True)  # before clipping
    norm = torch.nn.utils.clip_grad_norm_([p for _, p in params], max_norm=optim["clip"])
    out["grad_norm"] = norm.detach().float().reshape(1)
    opt = torch.optim.AdamW([p for _, p in params], lr=optim["lr"], betas=(optim["beta1"], optim["beta2"]),
                            eps=optim["eps"], weight_decay=optim["weight_decay"], foreach=False)
    opt.step()
    for name, p in params:
        out["param." + name] = p.detach().to(torch.float32, copy=True)
    return out, loss.detach()


def make_case(case, root):
    d = os.path.join(root, case["name"])
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    wdtype = case.get("weights_dtype", "float32")
    config_class, model_class = classes(case)
    cfg = config_class(**{**COMMON, **case["config"]}, initializer_range=STD)
    model = model_class(cfg).to(torch.float64)
    init_weights(model, case["seed"])
    model = model.to(getattr(torch, wdtype))
    model.save_pretrained(d)
    if case.get("spelling") == "v4":
        to_v4_spelling(os.path.join(d, "config.json"), type_key=case.get("v4_type_key", False))

    input_ids, labels = make_inputs(case, cfg.vocab_size)
    position_ids = packed_inputs(case, labels)
    safetensors.torch.save_file(input_tensors(input_ids, labels, position_ids), os.path.join(d, "input.safetensors"))

    # The reference reads the files just written, as any HF user would. HF's own loss of a packed row
    # (position_ids given) is its packed-sequence mask: it must agree with the documents run apart.
    ref = load_model(d, torch.float64)
    check_loaded(ref, d, case)
    # use_cache=False: transformers looks for packed rows only without a cache (masking_utils)
    packed = {} if position_ids is None else {"position_ids": position_ids, "use_cache": False}
    hf_loss = load_model(d, torch.float64, f64_exact=False)(input_ids=input_ids, labels=labels, **packed).loss
    out, loss = reference(ref, input_ids, labels, case["optim"], position_ids)
    assert abs(hf_loss.item() - loss.item()) <= 1e-6 * abs(loss.item()), (hf_loss.item(), loss.item())
    safetensors.torch.save_file(out, os.path.join(d, "expected.safetensors"))

    meta = dict(case["optim"])
    meta.update(versions=versions(), seed=case["seed"], weights_dtype=wdtype, description=case["description"])
    with open(os.path.join(d, "meta.json"), "w") as f:
        f.write(json.dumps(meta, indent=2) + "\n")
    clipped = out["grad_norm"].item() > case["optim"]["clip"]
    print(f"{case['name']}: B={case['B']} S={case['S']} loss={out['loss'].item():.6f} "
          f"grad_norm={out['grad_norm'].item():.6f} clip={case['optim']['clip']} "
          f"({'clipped' if clipped else 'not clipped'}) "
          f"logits std={out['logits'].std().item():.3f} size={dir_size(d) // 1024} KiB")


def check_loaded(model, d, case):
    """The loaded float64 model holds exactly the stored values, and HF read the config we meant."""
    stored = safetensors.torch.load_file(os.path.join(d, "model.safetensors"))
    names = [n for n, _ in model.named_parameters()]
    tied = case["config"]["tie_word_embeddings"]
    assert ("lm_head.weight" in names) != tied, names
    assert set(stored) == set(names), (sorted(stored), names)
    for n, p in model.named_parameters():
        assert torch.equal(p.detach(), stored[n].to(torch.float64)), n
    rp = model.config.rope_parameters
    want = case["config"]["rope_parameters"]
    for k, v in want.items():
        assert rp[k] == v, (k, rp[k], v)
    head_dim = getattr(model.config, "head_dim", None) or COMMON["hidden_size"] // 4
    assert head_dim == case["config"].get("head_dim", COMMON["hidden_size"] // 4)
    for key in ("sliding_window", "use_sliding_window", "max_window_layers", "attention_bias"):
        if key in case["config"] and not (key == "sliding_window" and not case["config"].get("use_sliding_window", 1)):
            assert getattr(model.config, key) == case["config"][key], (key, getattr(model.config, key))


def dir_size(d):
    return sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))


# --- --verify ------------------------------------------------------------------------------------

def rel_error(a, b):
    a, b = a.double(), b.double()
    den = b.norm().item()
    num = (a - b).norm().item()
    return num / den if den > 0 else num


def worst_errors(got, expected):
    """(worst error among the loose tensors, among the tight ones), or inf if a tensor is missing."""
    loose = tight = 0.0
    for name, e in expected.items():
        if name not in got:
            return math.inf, math.inf
        err = rel_error(got[name], e)
        if name == "logits" or name.startswith("grad."):
            loose = max(loose, err)
        else:
            tight = max(tight, err)
    return loose, tight


def load_case(case, root):
    """A written fixture: its directory, expected outputs, input ids, labels and meta.json (the optimizer step)."""
    d = os.path.join(root, case["name"])
    expected = safetensors.torch.load_file(os.path.join(d, "expected.safetensors"))
    inp = safetensors.torch.load_file(os.path.join(d, "input.safetensors"))
    with open(os.path.join(d, "meta.json")) as f:
        optim = json.load(f)
    position_ids = inp["position_ids"].long() if "position_ids" in inp else None
    return d, expected, inp["input_ids"].long(), inp["labels"].long(), optim, position_ids


def verify_case(case, root):
    d, expected, input_ids, labels, optim, position_ids = load_case(case, root)

    # The stored loss is the mean CE of the stored logits over the shifted, non-ignored labels.
    logits = expected["logits"].double()
    total, count = 0.0, 0
    B, S, V = logits.shape
    for b in range(B):
        for s in range(S - 1):
            t = labels[b, s + 1].item()
            if t == -100:
                continue
            total += (torch.logsumexp(logits[b, s], 0) - logits[b, s, t]).item()
            count += 1
    manual = total / count
    assert abs(manual - expected["loss"].item()) <= 1e-6 * manual, (manual, expected["loss"].item())
    # Ignored targets: row 0's prompt and, packed, each later document's first token (the prompt may hold one).
    ignored = {(0, s) for s in range(1, round(0.4 * S))}
    if position_ids is not None:
        ignored |= {(b, s) for b in range(B) for s in range(1, S) if position_ids[b, s] == 0}
    assert count == B * (S - 1) - len(ignored), count

    # A float32 engine (transformers itself, in f32) passes the test's tolerances...
    f32, _ = reference(load_model(d, torch.float32), input_ids, labels, optim, position_ids)
    loose, tight = worst_errors(f32, expected)
    assert loose <= TOL_LOOSE / 10 and tight <= TOL_TIGHT / 2, (case["name"], loose, tight)
    msg = f"{case['name']}: float32 transformers within tolerance (worst {loose:.1e} loose, {tight:.1e} tight)"

    # ...and a wrong reading of the config does not.
    config_class = model_class_of(d).config_class
    cfg = config_class.from_pretrained(d)
    mutants = {
        "rope_theta x2": dict(rope_parameters=dict(cfg.rope_parameters,
                                                   rope_theta=cfg.rope_parameters["rope_theta"] * 2)),
        "rms_norm_eps 1e-6 <-> 1e-5": dict(rms_norm_eps=1e-6 if cfg.rms_norm_eps != 1e-6 else 1e-5),
    }
    rope_type = cfg.rope_parameters["rope_type"]
    if rope_type != "default":
        mutants[f"no {rope_type} scaling"] = dict(rope_parameters=dict(rope_type="default",
                                                                      rope_theta=cfg.rope_parameters["rope_theta"]))
    if rope_type in ("yarn", "longrope"):  # the attention factor on cos/sin matters
        mutants["attention_factor 1"] = dict(rope_parameters=dict(cfg.rope_parameters, attention_factor=1.0))
    if rope_type == "longrope":  # the long factors, not the short ones, at this length
        mutants["short factors"] = dict(rope_parameters=dict(cfg.rope_parameters,
                                                             long_factor=cfg.rope_parameters["short_factor"]))
    if rope_type == "dynamic":  # the base of this batch's length, not of a shorter one
        mutants["dynamic at max_position_embeddings + 2"] = dict(max_position_embeddings=cfg.max_position_embeddings + 2)
    # Optimizer mistakes show in param.* (beta1/beta2 do not: they cancel in AdamW's first step).
    bad_optims = {"eps 1e-8": dict(optim, eps=1e-8), "no weight decay": dict(optim, weight_decay=0.0),
                  "lr x1.01": dict(optim, lr=optim["lr"] * 1.01)}
    if expected["grad_norm"].item() > optim["clip"]:
        bad_optims["no clipping"] = dict(optim, clip=math.inf)
    if getattr(cfg, "sliding_window", None):  # the window matters: full causal attention is wrong
        full = dict(sliding_window=None)
        if hasattr(cfg, "layer_types"):
            full["layer_types"] = ["full_attention"] * cfg.num_hidden_layers
        mutants["no sliding window"] = full
    runs = [(what, config_class.from_pretrained(d, **change), optim, position_ids) for what, change in mutants.items()]
    runs += [(what, cfg, bad, position_ids) for what, bad in bad_optims.items()]
    if position_ids is not None:  # the documents matter: one causal row over all of them is wrong
        runs.append(("documents not separated", cfg, optim, None))
    for what, bad_cfg, bad_optim, bad_pos in runs:
        got, _ = reference(load_model(d, torch.float64, config=bad_cfg), input_ids, labels, bad_optim, bad_pos)
        loose, tight = worst_errors(got, expected)
        margin = max(loose / TOL_LOOSE, tight / TOL_TIGHT)  # how far past the test's tolerance
        assert margin > 3, (case["name"], what, loose, tight)
        msg += f"; {what}: {margin:.0f}x past tolerance"
    print(msg)


def fixture_main(doc, cases_all, make_case, verify_case):
    """The command line of a fixture generator (this one and make_gpt2_fixtures.py): --out, --verify, --cases."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                                  "fixtures", "hf"))
    ap.add_argument("--verify", action="store_true", help="after writing, re-check every fixture (slower)")
    ap.add_argument("--cases", nargs="*", help="only these cases")
    args = ap.parse_args()

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    print("versions:", json.dumps(versions()))
    root = os.path.normpath(args.out)
    os.makedirs(root, exist_ok=True)
    cases = [c for c in cases_all if not args.cases or c["name"] in args.cases]
    for case in cases:
        make_case(case, root)
    print(f"total {sum(dir_size(os.path.join(root, c['name'])) for c in cases) // 1024} KiB in {root}")
    if args.verify:
        for case in cases:
            verify_case(case, root)
    return 0


def main():
    return fixture_main(__doc__, CASES, make_case, verify_case)


if __name__ == "__main__":
    sys.exit(main())
