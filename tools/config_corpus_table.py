#!/usr/bin/env python3
"""Prints the docs/configs.md table of the config corpus (tests/fixtures/configs): each file through
`seqpar train --print-config`, what it resolved to, what came from the file (honoured or mapped),
what was warned, what was refused. Usage: tools/config_corpus_table.py build/seqpar"""
import pathlib
import re
import subprocess
import sys

SHOWN = ["sp", "sp_mode", "dp_replicate", "dp_shard", "micro_batch", "zero_stage", "activation_checkpointing",
         "lr", "weight_decay", "clip", "lr_schedule"]


def run(seqpar, path):
    flag = "--deepspeed" if path.suffix == ".json" else "--accelerate-config"
    p = subprocess.run([seqpar, "train", "--print-config", flag, str(path)], capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


def row(seqpar, root, path):
    rc, out = run(seqpar, path)
    name = f"`{path.relative_to(root)}`"
    if rc != 0:
        msg = out.split("seqpar: error: ", 1)[-1].strip()
        problems = re.findall(r"\n  \d+\. (.*)", msg) or [msg]
        keys = []
        for p in problems:
            m = re.search(r"'([A-Za-z0-9_.\[\]]+)'", p)
            if "ArcticTraining recipe" in p:
                keys.append("an ArcticTraining recipe: each key named with its seqpar flag")
            elif m:
                keys.append(m.group(1))
            else:
                keys.append(p.split("=")[0] + " (the world arithmetic)")
        return f"| {name} | refused | | | | {'; '.join(dict.fromkeys(keys))} |"
    values, from_file = [], []
    for line in out.splitlines():
        m = re.match(r"  (\S+)\s+(\S+)\s+(.*)$", line)
        if not m:
            continue
        setting, value, source = m.groups()
        if setting in SHOWN:
            values.append(f"{setting} {value}")
        if str(path.name) in source and "derived" not in source:
            from_file.append(setting)
    warned = []
    if "warnings:" in out:
        for w in out.split("warnings:", 1)[1].splitlines():
            m = re.search(r": (?:fsdp_config\.)?([a-z_.]+)(?:=| has| not)", w)
            if "'fp16.enabled'=true is taken as bf16" in w or "'mixed_precision'=fp16 is taken as bf16" in w:
                warned.append("fp16 (taken as bf16: no loss scaling)")
            elif "not read by seqpar" in w:
                warned.append("ignored: " + w.split("(ignored): ", 1)[1])
            elif m:
                warned.append(m.group(1))
    return (f"| {name} | resolved | {', '.join(values)} | {', '.join(from_file)} | {'; '.join(warned)} | |")


def main():
    seqpar = sys.argv[1] if len(sys.argv) > 1 else "build/seqpar"
    root = pathlib.Path(__file__).resolve().parent.parent / "tests/fixtures/configs"
    print("| file | outcome | resolved to | from the file (honoured / mapped) | warned | refused |")
    print("| --- | --- | --- | --- | --- | --- |")
    for path in sorted(p for p in root.rglob("*") if p.is_file() and p.name != "README.md"):
        print(row(seqpar, root, path))


if __name__ == "__main__":
    main()
