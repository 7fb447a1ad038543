#!/usr/bin/env python3
# Rerun: python3 tools/make_rope_fixtures.py [--out tests/fixtures/rope/rope_frequencies.json]   (CPU torch + transformers)
"""RoPE frequencies and attention factors as transformers computes them, for tests/io/test_hf_rope.cpp.

For each case below: a Llama config.json (either spelling, the rope keys under test), a batch
length rope_len, and what transformers' LlamaRotaryEmbedding holds after one forward over
position_ids = arange(rope_len) (so dynamic_rope_update has run, as it does in a model's forward):
its inv_freq (f32) and attention_scaling. The C++ test parses the config with seqpar's parser and
compares rope_inv_freq(config, rope_len) and rope_attention_factor(config) with these values.
A rope_len of 0 means the rotary embedding as built (no forward: transformers' init values).
"""

import argparse
import json
import os
import sys

import torch
import transformers
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

BASE = dict(architectures=["LlamaForCausalLM"], model_type="llama", vocab_size=64, hidden_size=64,
            intermediate_size=128, num_hidden_layers=1, num_attention_heads=1, num_key_value_heads=1)


def phi3_factors(n, lo, hi):
    return [round(lo + (hi - lo) * (i / (n - 1)) ** 2, 6) for i in range(n)]


# name, config keys (over BASE), rope_len
CASES = [
    ("default_d64", dict(head_dim=64, max_position_embeddings=4096, rope_theta=10000.0), 0),
    ("linear_v4_type_key", dict(head_dim=64, max_position_embeddings=4096, rope_theta=10000.0,
                                rope_scaling=dict(type="linear", factor=2.0)), 0),
    ("linear_v5", dict(head_dim=128, max_position_embeddings=8192,
                       rope_parameters=dict(rope_type="linear", rope_theta=500000.0, factor=4.0)), 100),
    ("dynamic_below_max", dict(head_dim=128, max_position_embeddings=2048, rope_theta=500000.0,
                               rope_scaling=dict(rope_type="dynamic", factor=2.0)), 2048),
    ("dynamic_above_max", dict(head_dim=128, max_position_embeddings=2048, rope_theta=500000.0,
                               rope_scaling=dict(rope_type="dynamic", factor=2.0)), 6145),
    ("dynamic_d64_factor4", dict(head_dim=64, max_position_embeddings=4096,
                                 rope_parameters=dict(rope_type="dynamic", rope_theta=10000.0, factor=4.0)), 10000),
    ("llama3_31", dict(head_dim=128, max_position_embeddings=131072, rope_theta=500000.0,
                       rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                         original_max_position_embeddings=8192)), 0),
    ("yarn_qwen", dict(head_dim=128, max_position_embeddings=131072, rope_theta=1000000.0,
                       rope_scaling=dict(rope_type="yarn", factor=4.0, original_max_position_embeddings=32768)), 0),
    ("yarn_no_truncate_betas", dict(head_dim=64, max_position_embeddings=16384,
                                    rope_parameters=dict(rope_type="yarn", rope_theta=10000.0, factor=4.0,
                                                         original_max_position_embeddings=4096, beta_fast=16,
                                                         beta_slow=2, truncate=False)), 0),
    ("yarn_mscale", dict(head_dim=64, max_position_embeddings=163840,
                         rope_parameters=dict(rope_type="yarn", rope_theta=10000.0, factor=40.0,
                                              original_max_position_embeddings=4096, mscale=1.0,
                                              mscale_all_dim=0.8)), 0),
    ("yarn_attention_factor", dict(head_dim=64, max_position_embeddings=16384,
                                   rope_parameters=dict(rope_type="yarn", rope_theta=10000.0, factor=4.0,
                                                        original_max_position_embeddings=4096,
                                                        attention_factor=1.25)), 0),
    ("yarn_null_factor_top_level_original", dict(head_dim=64, max_position_embeddings=32768,
                                                 original_max_position_embeddings=4096,
                                                 rope_parameters=dict(rope_type="yarn", rope_theta=10000.0,
                                                                      factor=None,
                                                                      original_max_position_embeddings=8192)), 0),
    ("yarn_beta_zero_is_default", dict(head_dim=32, max_position_embeddings=8192,
                                       rope_parameters=dict(rope_type="yarn", rope_theta=10000.0, factor=2.0,
                                                            original_max_position_embeddings=4096, beta_fast=0,
                                                            beta_slow=0)), 0),
    ("longrope_phi3_short", dict(head_dim=96, max_position_embeddings=131072, original_max_position_embeddings=4096,
                                 rope_theta=10000.0,
                                 rope_scaling=dict(type="longrope", short_factor=phi3_factors(48, 1.0, 1.2),
                                                   long_factor=phi3_factors(48, 1.0, 40.0))), 4096),
    ("longrope_phi3_long", dict(head_dim=96, max_position_embeddings=131072, original_max_position_embeddings=4096,
                                rope_theta=10000.0,
                                rope_scaling=dict(type="longrope", short_factor=phi3_factors(48, 1.0, 1.2),
                                                  long_factor=phi3_factors(48, 1.0, 40.0))), 4097),
    ("longrope_factor_and_attention_factor", dict(head_dim=16, max_position_embeddings=1024,
                                                  rope_parameters=dict(rope_type="longrope", rope_theta=10000.0,
                                                                       original_max_position_embeddings=256,
                                                                       factor=2.0, attention_factor=1.1,
                                                                       short_factor=phi3_factors(8, 1.0, 2.0),
                                                                       long_factor=phi3_factors(8, 1.0, 8.0))), 1000),
    ("longrope_factor_below_one", dict(head_dim=16, max_position_embeddings=128,
                                       rope_parameters=dict(rope_type="longrope", rope_theta=10000.0,
                                                            original_max_position_embeddings=256,
                                                            short_factor=phi3_factors(8, 1.0, 2.0),
                                                            long_factor=phi3_factors(8, 1.0, 8.0))), 300),
]


def compute(config_dict, rope_len):
    cfg = LlamaConfig(**config_dict)
    rot = LlamaRotaryEmbedding(cfg)
    if rope_len > 0:
        x = torch.zeros(1, rope_len, 1, dtype=torch.float32)
        rot(x, torch.arange(rope_len, dtype=torch.int64)[None])
    inv = rot.inv_freq.to(torch.float32)
    return [float(v) for v in inv.tolist()], float(rot.attention_scaling)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                                  "fixtures", "rope", "rope_frequencies.json"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    transformers.logging.set_verbosity_error()
    cases = []
    for name, keys, rope_len in CASES:
        config = dict(BASE, **keys)
        inv, attn = compute(json.loads(json.dumps(config)), rope_len)  # a copy: transformers edits its dicts
        cases.append(dict(name=name, config=config, rope_len=rope_len, inv_freq=inv, attention_factor=attn))
        print(f"{name}: rope_len={rope_len} attention_factor={attn:.9g} inv_freq[1]={inv[1]:.9g} "
              f"inv_freq[-1]={inv[-1]:.9g}")
    out = dict(versions=dict(torch=torch.__version__, transformers=transformers.__version__), cases=cases)
    os.makedirs(os.path.dirname(os.path.normpath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        # repr of a Python float round-trips; the f32 values are exact in it.
        f.write(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
