#!/bin/bash
# Forty-first session, call 2 (after the stale maximum lands; run on the tree with it): issue 15's
# remaining figures, each beside its peer in the same call:
#   1. the attention table: seqpar's flash kernel and its cuDNN path and PyTorch's cuDNN SDPA, forward and
#      forward + backward, 16K / 64K, D = 64 / 128, H 32 and 16 over 8 KV heads (~90 s);
#   2. Llama-3.2-3B at 64K beside the ALST recipe (on the H200 never measured; 1.276x on the H100);
#   3. Llama-3.2-1B at 64K beside transformers as HF Trainer runs it (issue 15 asks >= 1.6x where it fits; it does
#      not fit an H100 at 64K).
#   END=SECONDS bash bench/gpu_calls/2026-12-08_s41_call2.sh OUT_DIR   (carry [".devtmp"]; ~480 s; prebuilt: sm2, the landed tree's sources)
set -u
REAL_OUT=$1
OUT=/tmp/s41c2
mkdir -p $OUT
. "$(dirname "$0")/build_gpu.sh"
trap "pack_logs $OUT $REAL_OUT" EXIT
build_gpu $OUT seqpar
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
peer_env $OUT
END=${END:-585}
fields='"S": *[0-9]*\|"D": *[0-9]*\|"pass": *"[a-z_]*"\|"ms": *[0-9.]*\|"fwd_path": *"[^"]*"\|"bwd_path": *"[^"]*"'
for NH in 32 16; do
  for be in cudnn flash; do
    $B/seqpar bench attention --backend $be --seq-lens 16384,65536 --heads $NH --kv-heads 8 --head-dims 64,128 \
      --passes fwd,fwd_bwd --warmup 2 --iters 5 --out $OUT/attn_${be}_$NH.jsonl > /dev/null 2>&1
    echo "H=$NH $be rc=$?: $(grep -o "$fields" $OUT/attn_${be}_$NH.jsonl | tr '\n' ' ')"
  done
  timeout 60 python3 bench/peers/torch_sdpa.py --seq-lens 16384,65536 --head-dims 64,128 --heads $NH --kv-heads 8 \
    --backends cudnn --layout bshd --iters 5 --warmup 2 > $OUT/attn_torch_$NH.log 2>&1 || echo "torch sdpa rc=$?"
  echo "H=$NH torch cudnn: $(grep -o "$fields" $OUT/attn_torch_$NH.log | tr '\n' ' ')"
done
echo "attention done $SECONDS s"
KEEP="--activation-checkpointing --checkpoint-keep-attention --tiled-loss-tokens 8192 --checkpoint-placement auto"
run_bounded l3_64k 70 $B/seqpar bench train --preset llama-3.2-3b --seq-lens 65536 --steps 4 $KEEP
run_bounded alst_l3_64k 150 python3 bench/peers/alst_train_step.py --preset llama-3.2-3b --seq-lens 65536 --steps 3 --torch-adam
run_bounded l1_64k 40 $B/seqpar bench train --preset llama-3.2-1b --seq-lens 65536 --steps 4 $KEEP
run_bounded hf_l1_64k 100 python3 bench/peers/hf_train_step.py --preset llama-3.2-1b --seq-lens 65536 --steps 3 --gradient-checkpointing
echo "done $SECONDS s"
