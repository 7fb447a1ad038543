#!/usr/bin/env bash
# Everything GPU in one go, on the GPU machine: configure and build with the CUDA backend, run the
# GPU tests (build-gpu/test_cuda), the GEMM benchmark (seqpar vs PyTorch on the same shapes), then
# the CPU tests (ctest) with the time that is left, and print a short summary last.
#
#   tools/gpu_check.sh OUT_DIR
#
# OUT_DIR receives (8 files; the device tool returns at most 8):
#   build.log        environment, configure and build output
#   test_cuda.log    GPU tests
#   attention.jsonl  attention benchmarks (seqpar flash / cuDNN and variants, PyTorch SDPA)
#   sp_attention.jsonl  sequence-parallel attention over this machine's GPUs, seqpar and torch_cp
#   bench.jsonl      one JSON line per GEMM shape and implementation (seqpar heuristic / autotuned,
#                    torch default / strict), then one per memory-bound op (seqpar, GB/s vs a copy)
#   ctest.log        CPU tests (stopped at the time budget, see GPU_CHECK_BUDGET)
#   misc.log         nvidia-smi, SASS checks of the kernels, bench stderr
#   summary.txt      the table printed at the end
# GPU_CHECK_BUDGET (seconds, default 450): the whole script aims to end within it.
# GPU_CHECK_TEST_TIMEOUT (seconds, default 420): the limit of the test_cuda run.
# GPU_CHECK_ONLY (comma list, default all): the sections to run after the build, of
#   tests, gemm (two passes beside torch), interleaved (GEMM shape by shape, default and --strict),
#   ops, attention, sp, train, sass, ctest.
# GPU_CHECK_INTERLEAVED (default "default --strict"): the torch variants of the interleaved GEMMs.
# GPU_CHECK_ATTN (default sdpa, what the transformers peer runs): seqpar's --attn-implementation
#   in the train section.
# Never changes the card's settings.
set -uo pipefail
OUT=${1:?usage: tools/gpu_check.sh OUT_DIR}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
cd "$(dirname "$0")/.."
BUDGET=${GPU_CHECK_BUDGET:-450}
JOBS=$(nproc)
BUILD=build-gpu
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
status=()  # "step: result" lines for the summary

left() { echo $((BUDGET - SECONDS)); }
want() { [[ -z ${GPU_CHECK_ONLY:-} || ,$GPU_CHECK_ONLY, == *,$1,* ]]; }
note() { status+=("$1"); echo "== $1"; }

# ---- environment, configure, build ----------------------------------------------------------
{
  echo "date: $(date -u +%FT%TZ)"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,power.limit --format=csv
  nvcc --version | tail -2
  cmake --version | head -1
  python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)' 2>&1
} >"$OUT/build.log" 2>&1
t0=$SECONDS
# The GPU machine has no utf8proc and no package registry: when .devtmp/utf8proc holds its header and
# static library (copied from the development machine's libutf8proc-dev and carried), build with those.
utf8proc=()
if [[ -f .devtmp/utf8proc/utf8proc.h && -f .devtmp/utf8proc/libutf8proc.a ]]; then
  utf8proc=(-DUTF8PROC_INCLUDE_DIR="$PWD/.devtmp/utf8proc" -DUTF8PROC_LIBRARY="$PWD/.devtmp/utf8proc/libutf8proc.a")
fi
if cmake -S . -B "$BUILD" -G Ninja -DSEQPAR_CUDA=ON -DCMAKE_BUILD_TYPE=Release "${utf8proc[@]}" >>"$OUT/build.log" 2>&1; then
  # -k 0: keep building the other targets when one fails (a colleague's part mid-edit).
  if cmake --build "$BUILD" -j "$JOBS" -- -k 0 >>"$OUT/build.log" 2>&1; then
    note "build: ok ($((SECONDS - t0)) s)"
  else
    note "build: FAILED for some targets ($((SECONDS - t0)) s; see build.log)"
    grep -E "FAILED:|error:" "$OUT/build.log" | head -20
  fi
else
  note "configure: FAILED (see build.log)"
  tail -30 "$OUT/build.log"
fi

# ---- GPU tests --------------------------------------------------------------------------------
if ! want tests; then
  :
elif [[ -x $BUILD/test_cuda ]]; then
  t0=$SECONDS
  timeout "${GPU_CHECK_TEST_TIMEOUT:-420}" "$BUILD/test_cuda" >"$OUT/test_cuda.log" 2>&1
  rc=$?
  passed=$(grep -c "^\[       OK \]" "$OUT/test_cuda.log")
  failed=$(grep -c "^\[  FAILED  \] .*(" "$OUT/test_cuda.log")
  note "test_cuda: rc=$rc, $passed passed, $failed failed ($((SECONDS - t0)) s)"
  grep -E "^\[  FAILED  \]|Failure|Expected|Which is|CUDA element|max \||rel L2" "$OUT/test_cuda.log" | head -40
else
  note "test_cuda: NOT BUILT"
fi

# ---- GEMM benchmark: seqpar, then PyTorch on the shapes seqpar ran ------------------------------
# Each output file is emptied only when a section that writes it runs (a second call with other
# GPU_CHECK_ONLY sections keeps the first call's results).
if want gemm || want interleaved || want ops || want train; then : >"$OUT/bench.jsonl"; fi
[[ -f $OUT/misc.log ]] || : >"$OUT/misc.log"
bench=()
# The GEMM benchmark is a diagnostic of its own binary (bench/diag/, built beside seqpar).
if [[ -x $BUILD/seqpar-diag ]]; then bench=("$BUILD/seqpar-diag" gemm); fi
if ((${#bench[@]})); then
  # Two alternating passes (seqpar, torch, seqpar, torch) and, per shape, the best of each side's
  # passes: per-shape times move by 5-10% with the position in a run (bench/NOTES.md), which a
  # single pass would charge to whichever side happened to run there.
  for pass in 1 2; do
    want gemm || break
    t0=$SECONDS
    echo "== ${bench[*]} --preset all (pass $pass)" >>"$OUT/misc.log"
    timeout 120 "${bench[@]}" --preset all --tokens 16384 --warmup 10 --iters 50 \
      --out "$OUT/gemm_seqpar.tmp" >/dev/null 2>>"$OUT/misc.log"
    note "bench gemm seqpar pass $pass: rc=$? ($((SECONDS - t0)) s)"
    cat "$OUT/gemm_seqpar.tmp" >>"$OUT/bench.jsonl" 2>/dev/null
    grep '"impl":"seqpar"' "$OUT/gemm_seqpar.tmp" >"$OUT/gemm_shapes.tmp"
    t0=$SECONDS
    for v in ${GPU_CHECK_TORCH_VARIANTS:-""}; do
      timeout 120 python3 bench/peers/torch_matmul.py --shapes-from "$OUT/gemm_shapes.tmp" --warmup 10 --iters 50 \
        $v --out "$OUT/bench.jsonl" >/dev/null 2>>"$OUT/misc.log"
      note "bench gemm torch ${v:-default} pass $pass: rc=$? ($((SECONDS - t0)) s)"
    done
    rm -f "$OUT/gemm_seqpar.tmp"
  done
  rm -f "$OUT/gemm_shapes.tmp"
  rm -f "$OUT/gemm_seqpar.tmp"
  # Shape by shape, seqpar and torch alternating round by round (the fair per-shape ratio).
  t0=$SECONDS
  if [[ -x $BUILD/seqpar-diag ]] && want interleaved; then
    # torch as configured by default (bf16 split-K reductions allowed), and --strict (f32 reductions
    # only, what seqpar does: the semantically equal peer).
    variants=("" --strict)
    [[ -n ${GPU_CHECK_INTERLEAVED:-} ]] && read -ra variants <<<"${GPU_CHECK_INTERLEAVED//default/}"
    for v in "${variants[@]}"; do
      timeout 180 python3 bench/peers/gemm_interleaved.py --seqpar-diag "$BUILD/seqpar-diag" --rounds 5 --iters 20 $v \
        >>"$OUT/bench.jsonl" 2>"$BUILD/gemm_interleaved.txt"
      rc=$?
      cat "$BUILD/gemm_interleaved.txt" >>"$OUT/misc.log"
      note "bench gemm interleaved ${v:-default}: rc=$rc ($((SECONDS - t0)) s): $(tail -1 "$BUILD/gemm_interleaved.txt")"
    done
  fi
  if want ops; then
    t0=$SECONDS
    timeout 60 "${bench[@]}" --preset ops --tokens 16384 --warmup 3 --iters 20 >>"$OUT/bench.jsonl" 2>>"$OUT/misc.log"
    note "bench ops seqpar: rc=$? ($((SECONDS - t0)) s)"
  fi
else
  note "bench gemm: NO BINARY ($BUILD/seqpar-diag not built; see build.log)"
fi

# ---- attention benchmark: seqpar (flash, cuDNN) and PyTorch SDPA (flash, cuDNN) on the same shapes --
want attention && : >"$OUT/attention.jsonl"
want sp && : >"$OUT/sp_attention.jsonl"
if [[ -x $BUILD/seqpar ]] && want attention; then
  for backend in flash cudnn; do
    t0=$SECONDS
    extra=()
    [[ $backend == cudnn ]] && extra=(--backend cudnn)
    if [[ $backend == flash ]] || "$BUILD/seqpar" bench attention --help 2>/dev/null | grep -q -- "--backend"; then
      timeout 150 "$BUILD/seqpar" bench attention --seq-lens 16384,65536 --head-dims 128 "${extra[@]}" \
        --warmup 2 --iters 5 >>"$OUT/attention.jsonl" 2>>"$OUT/misc.log"
      note "bench attention seqpar $backend: rc=$? ($((SECONDS - t0)) s)"
    fi
  done
  # Variants, tagged in the JSON: the old mma forward kernel, cuDNN's ragged graph, and our binary on
  # PyTorch's bundled cuDNN (separates the cuDNN version from our code).
  tag() { sed "s/^{/{\"variant\":\"$1\",/"; }
  t0=$SECONDS
  SEQPAR_FLASH_FWD_KERNEL=mma SEQPAR_FLASH_BWD_KERNEL=mma timeout 100 "$BUILD/seqpar" bench attention \
    --seq-lens 16384,65536 --head-dims 128 --warmup 2 --iters 5 2>>"$OUT/misc.log" | tag mma >>"$OUT/attention.jsonl"
  SEQPAR_CUDNN_DENSE=0 timeout 100 "$BUILD/seqpar" bench attention --backend cudnn --seq-lens 16384,65536 \
    --head-dims 128 --warmup 2 --iters 5 2>>"$OUT/misc.log" | tag ragged >>"$OUT/attention.jsonl"
  torch_cudnn=$(python3 -c 'import nvidia.cudnn as c, os; print(os.path.join(c.__path__[0], "lib"))' 2>/dev/null)
  if [[ -n $torch_cudnn && -d $torch_cudnn ]]; then
    LD_LIBRARY_PATH=$torch_cudnn${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} timeout 100 "$BUILD/seqpar" bench attention \
      --backend cudnn --seq-lens 16384,65536 --head-dims 128 --warmup 2 --iters 5 2>>"$OUT/misc.log" \
      | tag torch_cudnn_lib >>"$OUT/attention.jsonl"
  fi
  note "bench attention variants (mma, ragged, torch's cuDNN at ${torch_cudnn:-none}): ($((SECONDS - t0)) s)"
  t0=$SECONDS
  timeout 150 python3 bench/peers/torch_sdpa.py --seq-lens 16384,65536 --head-dims 128 --warmup 2 --iters 5 \
    >>"$OUT/attention.jsonl" 2>>"$OUT/misc.log"
  note "bench attention torch: rc=$? ($((SECONDS - t0)) s)"
  # The same with token-major operands ([1, S, H, D] transposed): the layout seqpar and HF models use.
  t0=$SECONDS
  timeout 150 python3 bench/peers/torch_sdpa.py --seq-lens 16384,65536 --head-dims 128 --warmup 2 --iters 5 \
    --layout bshd 2>>"$OUT/misc.log" | tag bshd >>"$OUT/attention.jsonl"
  note "bench attention torch, token-major operands: rc=$? ($((SECONDS - t0)) s)"
fi
if [[ -x $BUILD/seqpar ]] && want sp; then
  # Sequence-parallel attention on this machine's GPUs: one process per GPU over NCCL under seqpar
  # launch, with the PyTorch context-parallel peer on the same shapes (a world of 1 on one GPU:
  # the path runs, the scaling needs several GPUs).
  ngpu=$(nvidia-smi -L | wc -l)
  t0=$SECONDS
  timeout 150 "$BUILD/seqpar" launch --nproc-per-node "$ngpu" --master-port 29631 -- "$BUILD/seqpar" bench \
    sp-attention --sp "$ngpu" --tokens-per-rank 8192,32768 --kv-heads 32,8 --warmup 1 --iters 3 \
    2>>"$OUT/misc.log" | sed 's/^\[rank [0-9]*\] //' >>"$OUT/sp_attention.jsonl"
  note "bench sp-attention seqpar (nccl, $ngpu GPU): rc=$? ($((SECONDS - t0)) s)"
  t0=$SECONDS
  timeout 150 torchrun --nproc-per-node "$ngpu" --master-port 29632 bench/peers/torch_cp.py --tokens-per-rank \
    8192,32768 --kv-heads 32,8 --warmup 1 --iters 3 >>"$OUT/sp_attention.jsonl" 2>>"$OUT/misc.log"
  note "bench sp-attention torch_cp ($ngpu GPU): rc=$? ($((SECONDS - t0)) s)"
fi
if [[ -x $BUILD/seqpar ]] && want train; then
  # Whole training steps, Llama-3.2-1B sized, one GPU, beside transformers (HF Trainer's bf16 setup),
  # with and without activation checkpointing; lengths that OOM say so in their line.
  # seqpar also with checkpointing that keeps attention (no attention recompute; HF has no such mode).
  # GPU_CHECK_TRAIN_MODES (default: none, checkpointing, checkpointing keeping attention; "offload"
  # adds checkpointing with --checkpoint-offload, seqpar only).
  modes=("" "--activation-checkpointing" "--activation-checkpointing --checkpoint-keep-attention")
  [[ ${GPU_CHECK_TRAIN_MODES:-} == *offload* ]] && modes+=("--activation-checkpointing --checkpoint-offload")
  for ck in "${modes[@]}"; do
    t0=$SECONDS
    # With checkpointing also 64K: past where transformers runs out of memory (seqpar plan: it fits).
    lens=8192,32768
    [[ -n $ck ]] && lens=8192,32768,65536
    timeout 200 "$BUILD/seqpar" bench train --preset llama-3.2-1b --seq-lens $lens --steps 4 $ck \
      --attn-implementation "${GPU_CHECK_ATTN:-sdpa}" --profile \
      --tiled-loss-tokens $([[ -n $ck ]] && echo 4096 || echo 0) --out "$OUT/bench.jsonl" >/dev/null 2>>"$OUT/misc.log"
    note "bench train seqpar ${ck:-keep}: rc=$? ($((SECONDS - t0)) s)"
    [[ $ck == *keep-attention* || $ck == *offload* ]] && continue
    t0=$SECONDS
    timeout 200 python3 bench/peers/hf_train_step.py --preset llama-3.2-1b --seq-lens $lens --steps 4 \
      ${ck:+--gradient-checkpointing} --out "$OUT/bench.jsonl" >/dev/null 2>>"$OUT/misc.log"
    note "bench train hf ${ck:-keep}: rc=$? ($((SECONDS - t0)) s)"
  done
fi

# ---- SASS spot checks: 16-byte global accesses in the op kernels -------------------------------
want sass && {
  echo "== SASS: LDG/STG widths per kernels/cuda object"
  for o in "$BUILD"/CMakeFiles/seqpar_kernels.dir/src/kernels/cuda/*.cu.o; do
    [[ -f $o ]] || continue
    sass=$(cuobjdump --dump-sass "$o" 2>/dev/null)
    printf '%-28s LDG.128 %4d  LDG.64 %4d  LDG(32) %4d  STG.128 %4d  HGMMA %d\n' "$(basename "$o")" \
      "$(grep -c 'LDG.E.128' <<<"$sass")" "$(grep -c 'LDG.E.64' <<<"$sass")" \
      "$(grep -cE 'LDG.E(\.CONSTANT)? ' <<<"$sass")" "$(grep -c 'STG.E.128' <<<"$sass")" \
      "$(grep -c 'HGMMA' <<<"$sass")"
  done
  nvidia-smi
} >>"$OUT/misc.log" 2>&1

# ---- CPU tests with the time left ----------------------------------------------------------------
remaining=$(($(left) - 25))
if ! want ctest; then
  :
elif [[ -f $BUILD/CTestTestfile.cmake ]] && ((remaining > 20)); then
  t0=$SECONDS
  timeout "$remaining" ctest --test-dir "$BUILD" -j "$JOBS" --output-on-failure --timeout 120 >"$OUT/ctest.log" 2>&1
  rc=$?
  note "ctest: rc=$rc$( ((rc == 124)) && echo ' (stopped at the time budget)'), $(grep -E 'tests passed|tests failed' "$OUT/ctest.log" | tail -1) ($((SECONDS - t0)) s)"
else
  note "ctest: skipped (${remaining} s left)"
fi

# ---- summary ----------------------------------------------------------------------------------
for f in bench.jsonl attention.jsonl sp_attention.jsonl; do [[ -f $OUT/$f ]] || : >"$OUT/$f"; done
{
  echo "gpu_check $(date -u +%F) on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), total $SECONDS s"
  printf '%s\n' "${status[@]}"
  python3 - "$OUT/bench.jsonl" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
ops = [r for r in rows if r.get("bench") == "op"]
rows = [r for r in rows if r.get("bench") == "gemm"]
by = {}
for r in rows:
    key = r["impl"] + ("/" + r.get("variant", "default") if r["impl"] == "torch" else "")
    best = by.setdefault(key, {}).get(r["name"])
    if best is None or r["tflops"] > best["tflops"]:  # the best of the passes
        by[key][r["name"]] = r
sp, td, ts = by.get("seqpar", {}), by.get("torch/default", {}), by.get("torch/strict", {})
sa = by.get("seqpar-autotune", {})
if ops:
    print(f"{'op (T=16384, bf16)':24} {'ms':>8} {'GB/s':>7} {'of copy':>7}")
    for r in ops:
        print(f"{r['name']:24} {r['ms']:8.3f} {r['gbps']:7.0f} {r['of_copy']:7.2f}")
if not sp:
    print("no seqpar GEMM results"); sys.exit()
print(f"{'GEMM (bf16, f32 acc)':24} {'M':>6} {'N':>6} {'K':>6} {'seqpar ms':>9} {'TF/s':>6} "
      f"{'torch ms':>9} {'TF/s':>6} {'ratio':>6} {'strict TF/s':>11} {'autotuned TF/s':>14} {'ratio':>6}")
import math
nan = float("nan")
ratios, aratios = [], []
for name, r in sp.items():
    t, s, a = td.get(name), ts.get(name), sa.get(name)
    ratio = r["tflops"] / t["tflops"] if t else nan
    aratio = a["tflops"] / t["tflops"] if (a and t) else nan
    if t: ratios.append(ratio)
    if a and t: aratios.append(aratio)
    print(f"{name:24} {r['m']:6} {r['n']:6} {r['k']:6} {r['ms']:9.3f} {r['tflops']:6.0f} "
          f"{t['ms'] if t else nan:9.3f} {t['tflops'] if t else nan:6.0f} {ratio:6.2f} "
          f"{s['tflops'] if s else nan:11.0f} {a['tflops'] if a else nan:14.0f} {aratio:6.2f}")
def stats(label, xs):
    if xs:
        geo = math.exp(sum(math.log(x) for x in xs) / len(xs))
        print(f"{label}: geometric mean {geo:.3f}, min {min(xs):.3f}, max {max(xs):.3f}")
stats("seqpar/torch TFLOP/s", ratios)
stats("seqpar autotuned/torch TFLOP/s", aratios)
EOF
  python3 - "$OUT/attention.jsonl" <<'EOF'
import json, sys
rows = []
for l in open(sys.argv[1]):
    l = l.strip()
    if l.startswith("{"):
        try: rows.append(json.loads(l))
        except ValueError: pass
if not rows:
    print("no attention results"); sys.exit()
by = {}
name = lambda r: r.get("impl") + ("/" + r["variant"] if r.get("variant") else "")
for r in rows: by.setdefault((r.get("pass"), r.get("S"), r.get("D")), {})[name(r)] = r.get("tflops")
impls = sorted({name(r) for r in rows})
print("attention, causal, H=32, TFLOP/s: " + ", ".join(impls))
for k in sorted(by, key=lambda k: (str(k[0]), k[1] or 0, k[2] or 0)):
    v = by[k]
    cells = " ".join(f"{i}={v[i]:.0f}" for i in impls if v.get(i) is not None)
    ratios = [f"{a}/{b}={v[a]/v[b]:.2f}" for a, b in (("seqpar_flash", "torch_sdpa_flash"), ("seqpar_cudnn", "torch_sdpa_cudnn"),
                                                      ("seqpar_cudnn/ragged", "torch_sdpa_cudnn"),
                                                      ("seqpar_cudnn/torch_cudnn_lib", "torch_sdpa_cudnn"),
                                                      ("seqpar_flash", "torch_sdpa_flash/bshd"),
                                                      ("seqpar_cudnn", "torch_sdpa_cudnn/bshd"))
              if v.get(a) and v.get(b)]
    print(f"  {k[0]} S={k[1]} D={k[2]}: {cells}  {' '.join(ratios)}")
EOF
  python3 - "$OUT/bench.jsonl" "$BUILD/seqpar" <<'EOF'
import json, subprocess, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
rows = [r for r in rows if r.get("bench") == "train"]
def planned(r):  # `seqpar plan` for the same run, against the allocator's measured peak
    if r["impl"] != "seqpar" or "peak_mem_gib" not in r or r.get("model") not in ("llama-3.2-1b", "llama-3.2-3b", "llama-3.1-8b", "tiny"):
        return ""
    cmd = [sys.argv[2], "plan", "--preset", r["model"], "--seq-len", str(r["seq_len"]), "--micro-batch",
           str(r.get("micro_batch", 1)), "--sp", str(r.get("sp", 1)), "--gpus", str(r.get("sp", 1) * r.get("dp", 1)),
           "--sp-mode", r.get("sp_mode", "ulysses"), "--tiled-mlp-tokens", str(r.get("tiled_mlp_tokens", 0)),
           "--tiled-loss-tokens", str(r.get("tiled_loss_tokens", 0)), "--zero-stage", str(r.get("zero_stage", 0)), "--json"]
    if r.get("activation_checkpointing"): cmd.append("--activation-checkpointing")
    if r.get("checkpoint_keep_attention"): cmd.append("--checkpoint-keep-attention")
    if r.get("checkpoint_offload"): cmd.append("--checkpoint-offload")
    try:
        plan = json.loads(subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout)
        return f", plan {plan['peak_gib']:.2f} GiB ({plan['peak_gib'] / r['peak_mem_gib']:.3f} of measured)"
    except Exception as e:
        return f", plan failed: {e}"
if rows:
    print("train steps (Llama-3.2-1B sized, one GPU): impl, checkpointing, seq_len: step ms, tokens/s, TFLOP/s, peak GiB")
    for r in rows:
        if "error" in r:
            print(f"  {r['impl']:6} ckpt={r.get('activation_checkpointing')}{'+attn' if r.get('checkpoint_keep_attention') else ''}{'+offload' if r.get('checkpoint_offload') else ''} S={r['seq_len']}: {r['error'][:80]}")
        else:
            print(f"  {r['impl']:6} ckpt={r.get('activation_checkpointing')}{'+attn' if r.get('checkpoint_keep_attention') else ''}{'+offload' if r.get('checkpoint_offload') else ''} S={r['seq_len']}: {r['step_ms']:.0f} ms, "
                  f"{r['tokens_per_s_per_gpu']:.0f} tok/s, {r['tflops_per_gpu']:.0f} TFLOP/s, {r['peak_mem_gib']:.1f} GiB"
                  + planned(r))
EOF
  python3 - "$OUT/sp_attention.jsonl" <<'EOF'
import json, sys
rows = []
for l in open(sys.argv[1]):
    l = l.strip()
    if l.startswith("{"):
        try: rows.append(json.loads(l))
        except ValueError: pass
if not rows:
    print("no sp-attention results"); sys.exit()
print("sp-attention fwd+bwd (ms, efficiency = one GPU / (sp x ms)):")
for r in rows:
    eff = r.get("efficiency")
    print(f"  {r.get('impl')} sp={r.get('sp')} {r.get('mode')} s={r.get('tokens_per_rank')} Hkv={r.get('Hkv')}: "
          f"ms={r.get('ms')} single={r.get('ms_single')} eff={eff if eff is None else round(eff, 3)} "
          f"{r.get('error', '')}")
EOF
} >"$OUT/summary.txt" 2>&1
echo
cat "$OUT/summary.txt"
