#!/usr/bin/env python3
# Rerun: python3 tools/make_gpt2_fixtures.py [--out tests/fixtures/hf] [--verify]   (CPU torch + transformers)
"""GPT-2 reference fixtures for `seqpar fwdbwd` (checked by tests/cli/test_fwdbwd_hf.cpp beside the Llama ones).

For each case below this builds a small random transformers GPT2LMHeadModel (LayerNorm with bias,
learned position embeddings wpe, fused c_attn in Conv1D [in, out] layout, GELU MLP c_fc / c_proj
with biases, tied LM head) and writes tests/fixtures/hf/<case>/ with the same files and meaning
as tools/make_hf_fixtures.py (config.json, model.safetensors, input.safetensors, expected.safetensors
with logits, loss, grad.<HF name> for every parameter of named_parameters(), grad_norm and
param.<name> after a clipped AdamW step, meta.json). Row 0 of every batch is a masked prompt (its
first 40% of labels are -100).

Positions: the batch is given without position_ids, so transformers uses 0 .. S-1 on every row,
which is what seqpar's batch pipeline gives each row (data/sp_batch.h: positions restart per
document, a row of a fwdbwd batch is one document).

The reference is computed in float64 (GPT-2 in transformers has no float32 upcast: LayerNorm, the
GELUs, sdpa attention and our own loss all run in the model's dtype). Deterministic: weights and
tokens from a torch.Generator seeded per case. --verify then re-checks every fixture: transformers
in float32 passes the C++ test's tolerances, and a wrong reading of the config (the other GELU
form, no position embedding, layer_norm_epsilon changed) does not.
"""

import json
import math
import os
import shutil
import sys

import safetensors.torch
import torch
import transformers
from transformers import GPT2Config, GPT2LMHeadModel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_hf_fixtures import (TOL_LOOSE, TOL_TIGHT, dir_size, fixture_main, input_tensors, load_case,  # noqa: E402
                              make_inputs, packed_inputs, reference, versions, worst_errors)

COMMON = dict(vocab_size=96, n_embd=32, n_layer=2, n_head=4, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)

OPTIM = dict(lr=1e-2, beta1=0.9, beta2=0.95, eps=1e-3, weight_decay=0.1, clip=0.5)

CASES = [
    dict(name="gpt2_gelu_new", seed=1201, B=2, S=16,
         config=dict(n_positions=64, n_inner=None, activation_function="gelu_new", layer_norm_epsilon=1e-5),
         optim=OPTIM,
         description="GPT-2: gelu_new (tanh GELU), n_inner null (4 * n_embd = 128), n_positions 64, tied "
                     "LM head, H=4 (head_dim 8), clipping active"),
    dict(name="gpt2_gelu_erf", seed=1202, B=2, S=14,
         config=dict(n_positions=32, n_inner=48, activation_function="gelu", layer_norm_epsilon=1e-3),
         optim=dict(lr=2e-2, beta1=0.8, beta2=0.99, eps=2e-3, weight_decay=0.05, clip=50.0),
         description="GPT-2: gelu (erf GELU), n_inner 48 set, layer_norm_epsilon 1e-3, n_positions 32; clip above "
                     "the gradient norm (no clipping)"),
    dict(name="gpt2_near_positions", seed=1203, B=2, S=20,
         config=dict(n_positions=20, n_inner=None, activation_function="gelu_pytorch_tanh", layer_norm_epsilon=1e-5),
         optim=OPTIM,
         description="GPT-2: a sequence as long as n_positions=20 (the last row of wpe is used), "
                     "gelu_pytorch_tanh (the tanh form, as gelu_new)"),
    dict(name="gpt2_packed", seed=1205, B=2, S=20, docs=[[7, 13], [5, 6, 9]],
         config=dict(n_positions=32, n_inner=None, activation_function="gelu_new", layer_norm_epsilon=1e-5),
         optim=OPTIM,
         description="GPT-2 with packed documents (position_ids as DataCollatorWithFlattening writes them: each "
                     "document reads wpe from row 0): row 0 holds documents of 7 and 13 tokens, row 1 of 5, 6 and 9"),
    dict(name="gpt2_d64", seed=1204, B=2, S=24,
         config=dict(n_embd=128, n_head=2, n_layer=1, n_positions=32, n_inner=64, activation_function="gelu_new",
                     layer_norm_epsilon=1e-5),
         optim=OPTIM,
         description="GPT-2 with head_dim 64 (n_embd 128, H=2; one layer, n_inner 64 to keep the files small), a "
                     "head size the CUDA attention kernels take, for the GPU tests"),
]

# Initialization: N(0, STD) matrices and biases, LayerNorm weights 1 + N(0, 0.1) and biases
# N(0, 0.1); the tied wte is the LM head too, so it gets the larger std (logits of order 1).
STD = 0.15
BIAS_STD = 0.05
WTE_STD = 0.2
WPE_STD = 0.1
NORM_JITTER = 0.1


def init_weights(model, seed):
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():  # fixed order: the module tree's
            def rand(std):
                return std * torch.randn(p.shape, generator=gen, dtype=torch.float64)
            if ".ln_" in name or name.startswith("transformer.ln_f"):
                p.copy_(1.0 + rand(NORM_JITTER) if name.endswith("weight") else rand(NORM_JITTER))
            elif name == "transformer.wte.weight":
                p.copy_(rand(WTE_STD))
            elif name == "transformer.wpe.weight":
                p.copy_(rand(WPE_STD))
            elif name.endswith("bias"):
                p.copy_(rand(BIAS_STD))
            else:
                p.copy_(rand(STD))


def config_of(case):
    kw = dict(COMMON)
    kw.update(case["config"])
    return GPT2Config(**kw, initializer_range=STD, tie_word_embeddings=True)


def load_model(d, dtype, config=None):
    kwargs = dict(dtype=dtype, attn_implementation="sdpa")
    if config is not None:
        kwargs["config"] = config
    model = GPT2LMHeadModel.from_pretrained(d, **kwargs)
    model.train()
    return model


def make_case(case, root):
    d = os.path.join(root, case["name"])
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    cfg = config_of(case)
    model = GPT2LMHeadModel(cfg).to(torch.float64)
    init_weights(model, case["seed"])
    model.to(torch.float32).save_pretrained(d)

    input_ids, labels = make_inputs(case, cfg.vocab_size)
    position_ids = packed_inputs(case, labels)
    assert case["S"] <= cfg.n_positions
    safetensors.torch.save_file(input_tensors(input_ids, labels, position_ids), os.path.join(d, "input.safetensors"))

    ref = load_model(d, torch.float64)
    check_loaded(ref, d, case)
    # use_cache=False: transformers looks for packed rows only without a cache (masking_utils)
    packed = {} if position_ids is None else {"position_ids": position_ids, "use_cache": False}
    hf_loss = ref(input_ids=input_ids, labels=labels, **packed).loss
    ref.zero_grad(set_to_none=True)
    out, loss = reference(ref, input_ids, labels, case["optim"], position_ids)
    assert abs(hf_loss.item() - loss.item()) <= 1e-6 * abs(loss.item()), (hf_loss.item(), loss.item())
    safetensors.torch.save_file(out, os.path.join(d, "expected.safetensors"))

    meta = dict(case["optim"])
    meta.update(versions=versions(), seed=case["seed"], weights_dtype="float32", description=case["description"])
    with open(os.path.join(d, "meta.json"), "w") as f:
        f.write(json.dumps(meta, indent=2) + "\n")
    clipped = out["grad_norm"].item() > case["optim"]["clip"]
    print(f"{case['name']}: B={case['B']} S={case['S']} loss={out['loss'].item():.6f} "
          f"grad_norm={out['grad_norm'].item():.6f} ({'clipped' if clipped else 'not clipped'}) "
          f"logits std={out['logits'].std().item():.3f} size={dir_size(d) // 1024} KiB")


def check_loaded(model, d, case):
    """The loaded model holds exactly the stored values (the tied lm_head is wte), and HF read the config."""
    stored = safetensors.torch.load_file(os.path.join(d, "model.safetensors"))
    names = [n for n, _ in model.named_parameters()]
    assert "lm_head.weight" not in names, names
    assert model.lm_head.weight.data_ptr() == model.transformer.wte.weight.data_ptr()
    assert set(stored) == set(names), (sorted(stored), names)
    for n, p in model.named_parameters():
        assert torch.equal(p.detach(), stored[n].to(torch.float64)), n
    for k, v in case["config"].items():
        assert getattr(model.config, k) == v, (k, getattr(model.config, k), v)


def verify_case(case, root):
    d, expected, input_ids, labels, optim, position_ids = load_case(case, root)

    f32, _ = reference(load_model(d, torch.float32), input_ids, labels, optim, position_ids)
    loose, tight = worst_errors(f32, expected)
    assert loose <= TOL_LOOSE / 10 and tight <= TOL_TIGHT / 2, (case["name"], loose, tight)
    msg = f"{case['name']}: float32 transformers within tolerance (worst {loose:.1e} loose, {tight:.1e} tight)"

    cfg = GPT2Config.from_pretrained(d)
    other = "gelu" if cfg.activation_function != "gelu" else "gelu_new"
    mutants = {f"activation_function {other}": dict(activation_function=other),
               "layer_norm_epsilon x100": dict(layer_norm_epsilon=cfg.layer_norm_epsilon * 100)}
    for what, change in mutants.items():
        got, _ = reference(load_model(d, torch.float64, config=GPT2Config.from_pretrained(d, **change)), input_ids,
                           labels, optim, position_ids)
        loose, tight = worst_errors(got, expected)
        margin = max(loose / TOL_LOOSE, tight / TOL_TIGHT)
        assert margin > 3, (case["name"], what, loose, tight)
        msg += f"; {what}: {margin:.0f}x past tolerance"
    # Positions matter: the same weights with wpe zeroed.
    model = load_model(d, torch.float64)
    with torch.no_grad():
        model.transformer.wpe.weight.zero_()
    got, _ = reference(model, input_ids, labels, optim, position_ids)
    got = {k: v for k, v in got.items() if k not in ("grad.transformer.wpe.weight", "param.transformer.wpe.weight")}
    loose, tight = worst_errors(got, {k: v for k, v in expected.items() if k in got})
    margin = max(loose / TOL_LOOSE, tight / TOL_TIGHT)
    assert margin > 3, (case["name"], "no positions", loose, tight)
    msg += f"; no position embedding: {margin:.0f}x past tolerance"
    if position_ids is not None:  # the documents matter: one row with positions 0..S-1 is wrong
        got, _ = reference(load_model(d, torch.float64), input_ids, labels, optim)
        loose, tight = worst_errors(got, expected)
        margin = max(loose / TOL_LOOSE, tight / TOL_TIGHT)
        assert margin > 3, (case["name"], "documents not separated", loose, tight)
        msg += f"; documents not separated: {margin:.0f}x past tolerance"
    print(msg)


def main():
    return fixture_main(__doc__, CASES, make_case, verify_case)


if __name__ == "__main__":
    sys.exit(main())
