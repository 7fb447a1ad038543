#!/usr/bin/env python3
# Run: python3 tools/verify_export.py [--seqpar build/seqpar] [--checkpoint DIR] [--model HF_DIR ...] [--work DIR]
"""Checks `seqpar export` against Hugging Face transformers (needs torch, transformers, safetensors).

1. A checkpoint: --checkpoint DIR (a checkpoint or a save directory), or one made here by
   `seqpar train` (the built-in tiny Llama on the recall task, sp=2; with --model HF_DIR, that
   model trained on a random token file written here in seqpar's SPTOK1 format). Several --model
   directories (e.g. the Qwen2, Qwen3 and Mistral fixtures of tests/fixtures/hf) are checked one
   after the other, each in its own subdirectory of the work directory.
2. `seqpar export --dtype f32` and `--dtype bf16` of it.
3. For each export: transformers' AutoModelForCausalLM.from_pretrained(export, dtype=float32) (the
   family's class from the exported config.json's model_type, sliding windows included) runs a
   fixed batch; `seqpar fwdbwd` runs the same batch on the export and on the checkpoint directory
   itself (a checkpoint is an HF directory too). Pass: logits within ||a - b|| / ||b|| <= 1e-4
   and loss within 1e-5 (the tolerances of tests/cli/test_fwdbwd_hf.cpp); the f32 export gives
   the checkpoint's logits exactly; the bf16 export differs from the f32 checkpoint by bf16
   rounding only (<= 2e-2).
Prints one line per comparison and a JSON summary; exits 1 on any failure.
"""

import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np
import safetensors.numpy
import torch
import transformers
from transformers import AutoModelForCausalLM

TOL_LOGITS = 1e-4
TOL_LOSS = 1e-5
TOL_BF16 = 2e-2


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    den = np.linalg.norm(b)
    return float(np.linalg.norm(a - b) / den) if den else float(np.linalg.norm(a))


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stdout}")
    return p.stdout


def write_token_file(path, docs):
    """SPTOK1 without a loss mask (docs/data-format.md)."""
    tokens = np.concatenate(docs).astype("<u4")
    offsets = np.concatenate([[0], np.cumsum([len(d) for d in docs])]).astype("<u8")
    with open(path, "wb") as f:
        f.write(b"SPTOK1" + struct.pack("<HIIQQ", 1, 1, 0, len(tokens), len(docs)))
        f.write(tokens.tobytes())
        f.write(b"\0" * ((-(32 + 4 * len(tokens))) % 8))
        f.write(offsets.tobytes())


def make_checkpoint(seqpar, work, model):
    save = os.path.join(work, "ckpt")
    cmd = [seqpar, "train", "--sp", "2", "--steps", "20", "--micro-batch", "4", "--eval-every", "0",
           "--log-every", "10", "--save-dir", save]
    if model:
        vocab = json.load(open(os.path.join(model, "config.json")))["vocab_size"]
        rng = np.random.default_rng(0)
        docs = [rng.integers(0, vocab, int(rng.integers(5, 40))) for _ in range(200)]
        data = os.path.join(work, "tokens.bin")
        write_token_file(data, docs)
        cmd += ["--model", model, "--data", data, "--seq-len", "32", "--lr", "3e-3"]
    else:
        cmd += ["--seq-len", "64", "--num-pairs", "4", "--num-queries", "4"]
    run(cmd)
    return save


def fwdbwd_logits(seqpar, model_dir, batch, out):
    run([seqpar, "fwdbwd", "--model", model_dir, "--input", batch, "--out", out])
    r = safetensors.numpy.load_file(out)
    return r["logits"], float(r["loss"][0])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seqpar", default="build/seqpar")
    ap.add_argument("--checkpoint", help="checkpoint or save directory (default: train one here)")
    ap.add_argument("--model", nargs="*", default=[None],
                    help="HF model directories to train from when making the checkpoint (one check each)")
    ap.add_argument("--work", help="working directory (default: a temporary one)")
    args = ap.parse_args()
    torch.manual_seed(0)
    root = args.work or tempfile.mkdtemp(prefix="seqpar_verify_export_")
    failures, summary = [], {"torch": torch.__version__, "transformers": transformers.__version__, "checks": []}
    for i, model in enumerate(args.model):
        work = root if len(args.model) == 1 else os.path.join(root, f"{i}_{os.path.basename(os.path.normpath(model))}")
        os.makedirs(work, exist_ok=True)
        ckpt = args.checkpoint or make_checkpoint(args.seqpar, work, model)
        verify(args, ckpt, work, model or "built-in", failures, summary)
    summary["passed"] = not failures
    print(json.dumps(summary, indent=1))
    sys.exit(1 if failures else 0)


def verify(args, ckpt, work, label, failures, summary):
    def check(name, value, tol):
        name = f"[{label}] {name}"
        ok = value <= tol
        summary["checks"].append({"check": name, "value": value, "tol": tol, "ok": ok})
        print(f"{'ok  ' if ok else 'FAIL'} {name}: {value:.3e} (tolerance {tol:.0e})")
        if not ok:
            failures.append(name)

    exports = {}
    for dtype in ("f32", "bf16"):
        out = os.path.join(work, f"hf_{dtype}")
        print(run([args.seqpar, "export", "--checkpoint", ckpt, "--out", out, "--dtype", dtype]).strip())
        exports[dtype] = out
    cfg = json.load(open(os.path.join(exports["f32"], "config.json")))
    vocab = cfg["vocab_size"]

    # A fixed batch: two rows of 24 tokens, the first 4 labels of row 0 ignored.
    ids = ((np.arange(2 * 24) * 37 + 11) % vocab).astype(np.int32).reshape(2, 24)
    labels = ids.copy()
    labels[0, :4] = -100
    batch = os.path.join(work, "batch.safetensors")
    safetensors.numpy.save_file({"input_ids": ids, "labels": labels}, batch)

    # The checkpoint directory itself (resolve a save directory through its `latest`).
    ckpt_dir = ckpt
    if not os.path.exists(os.path.join(ckpt_dir, "trainer_state.json")):
        ckpt_dir = os.path.join(ckpt, open(os.path.join(ckpt, "latest")).read().strip())
    ck_logits, ck_loss = fwdbwd_logits(args.seqpar, ckpt_dir, batch, os.path.join(work, "out_ckpt.safetensors"))

    for dtype, hf_dir in exports.items():
        model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32, attn_implementation="eager")
        model.eval()
        with torch.no_grad():
            r = model(input_ids=torch.from_numpy(ids).long(), labels=torch.from_numpy(labels).long())
        hf_logits, hf_loss = r.logits.float().numpy(), float(r.loss)
        sp_logits, sp_loss = fwdbwd_logits(args.seqpar, hf_dir, batch, os.path.join(work, f"out_{dtype}.safetensors"))
        check(f"{dtype} export: transformers vs seqpar fwdbwd logits", rel(sp_logits, hf_logits), TOL_LOGITS)
        check(f"{dtype} export: transformers vs seqpar fwdbwd loss", abs(sp_loss - hf_loss) / abs(hf_loss), TOL_LOSS)
        if dtype == "f32":
            check("f32 export vs checkpoint: fwdbwd logits (exact)", rel(sp_logits, ck_logits), 0.0)
            check("f32 export: transformers vs fwdbwd on the checkpoint", rel(ck_logits, hf_logits), TOL_LOGITS)
        else:
            check("bf16 export vs f32 checkpoint: fwdbwd logits (bf16 rounding)", rel(sp_logits, ck_logits), TOL_BF16)
    summary.setdefault("checkpoints", []).append(ckpt_dir)


if __name__ == "__main__":
    main()
