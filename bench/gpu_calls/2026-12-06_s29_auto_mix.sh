#!/bin/bash
# Twenty-ninth session: auto's per-direction rule (attention_backend.h's auto_runs_own_kernel: the sm_90 forward at
# D = 128 and the sm_90 backward at D = 64, causal, one document, >= 16K tokens; cuDNN for the rest).
# 1. tests (the attention tests, with CudnnAttention.AutoPairsBackendsPerDirection: both mixed pairs against
#    all-cuDNN and all-flash, and the paths auto takes); 2. `seqpar bench attention` flash / cudnn / auto at
#    4K-64K, D = 64 and 128, H 32 and 16 over 8 KV heads (where the rule's length could move), and PyTorch's cuDNN
#    SDPA at 16K / 64K (bench/peers/torch_sdpa.py); 3. training steps
#    of the new tree beside the commit before (e14e165, auto = cuDNN both ways; built from .devtmp/base, a `git
#    archive e14e165`), alternating: Llama-3.2-1B at 64K keeping attention (issue 15's mode) and Qwen3-1.7B at
#    64K keeping attention with --checkpoint-placement auto (issue 17's).
#   [ROUNDS=2] [QWEN=1] bash bench/gpu_calls/2026-12-06_s29_auto_mix.sh OUT_DIR   (~520 s; carry [".devtmp"]; ROUNDS
#   of the 1B pair, QWEN=0 leaves the Qwen pair out)
set -u
OUT=$1
. "$(dirname "$0")/build_gpu.sh"
build_other base .devtmp/base "" seqpar &
build_gpu $OUT seqpar test_cuda
wait
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
test_build gpu
for NH in 32 16; do
  for be in cudnn flash auto; do
    $B/seqpar bench attention --backend $be --seq-lens 4096,8192,16384,32768,65536 --heads $NH --kv-heads 8 \
      --head-dims 64,128 --passes fwd,fwd_bwd --out $OUT/attn_${be}_$NH.jsonl > /dev/null 2>&1
    echo "H=$NH $be rc=$?: $(grep -o '"S": *[0-9]*\|"D": *[0-9]*\|"pass": *"[a-z_]*"\|"ms": *[0-9.]*\|"fwd_path": *"[^"]*"\|"bwd_path": *"[^"]*"' $OUT/attn_${be}_$NH.jsonl | tr '\n' ' ')"
  done
done
# PyTorch's cuDNN SDPA on the same shapes (issue 15's second peer), H 32 and 16.
for NH in 32 16; do
  timeout 60 python3 bench/peers/torch_sdpa.py --seq-lens 16384,65536 --head-dims 64,128 --heads $NH --kv-heads 8 \
    --backends cudnn --layout bshd --iters 5 --warmup 2 > $OUT/attn_torch_$NH.log 2>&1 || echo "torch sdpa rc=$?"
  echo "H=$NH torch cudnn: $(grep -o '"S": *[0-9]*\|"D": *[0-9]*\|"pass": *"[a-z_]*"\|"ms": *[0-9.]*' $OUT/attn_torch_$NH.log | tr '\n' ' ')"
done
echo "attention done $SECONDS s"
KEEP="--activation-checkpointing --checkpoint-keep-attention --tiled-loss-tokens 8192"
for r in $(seq 1 ${ROUNDS:-2}); do
  for bin in build-base $B; do
    n=${bin#build-}
    run_bounded l64_${n}_$r 50 $bin/seqpar bench train --preset llama-3.2-1b --seq-lens 65536 --steps 3 $KEEP
  done
done
[ "${QWEN:-1}" = 1 ] && for bin in build-base $B; do
  n=${bin#build-}
  run_bounded q64_${n} 60 $bin/seqpar bench train --preset qwen3-1.7b --seq-lens 65536 --steps 3 $KEEP --checkpoint-placement auto
done
echo "done $SECONDS s"
