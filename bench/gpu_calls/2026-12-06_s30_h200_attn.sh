#!/bin/bash
# Thirtieth session, on the H200 after issue 17's Qwen calls (tests already passed on this machine; ~400 s; carry
# [".devtmp"], .devtmp/base = git archive e14e165): issue 15's attention table on the card it names (seqpar's
# cudnn / flash / auto and PyTorch's cuDNN SDPA, 16K / 64K, D = 64 / 128, H 32 and 16 over 8 KV heads), then
# Llama-3.2-1B at 64K keeping attention: this tree (auto per direction), e14e165 (auto = cuDNN both ways) and the
# ALST recipe, same call.
#   bash bench/gpu_calls/2026-12-06_s30_h200_attn.sh OUT_DIR
set -u
OUT=$1
. "$(dirname "$0")/build_gpu.sh"
build_other base .devtmp/base "" seqpar &
build_gpu $OUT seqpar
for NH in 32 16; do
  for be in cudnn flash auto; do
    $B/seqpar bench attention --backend $be --seq-lens 16384,65536 --heads $NH --kv-heads 8 --head-dims 64,128 \
      --passes fwd,fwd_bwd --out $OUT/attn_${be}_$NH.jsonl > /dev/null 2>&1
    echo "H=$NH $be rc=$?: $(grep -o '"S": *[0-9]*\|"D": *[0-9]*\|"pass": *"[a-z_]*"\|"ms": *[0-9.]*\|"fwd_path": *"[^"]*"\|"bwd_path": *"[^"]*"' $OUT/attn_${be}_$NH.jsonl | tr '\n' ' ')"
  done
  timeout 60 python3 bench/peers/torch_sdpa.py --seq-lens 16384,65536 --head-dims 64,128 --heads $NH --kv-heads 8 \
    --backends cudnn --layout bshd --iters 5 --warmup 2 > $OUT/attn_torch_$NH.log 2>&1 || echo "torch sdpa rc=$?"
  echo "H=$NH torch cudnn: $(grep -o '"S": *[0-9]*\|"D": *[0-9]*\|"pass": *"[a-z_]*"\|"ms": *[0-9.]*' $OUT/attn_torch_$NH.log | tr '\n' ' ')"
done
echo "attention done $SECONDS s"
wait
peer_env $OUT
KEEP="--activation-checkpointing --checkpoint-keep-attention --tiled-loss-tokens 8192"
END=${END:-590}
for bin in $B build-base; do
  n=${bin#build-}
  run_bounded l64_$n 50 $bin/seqpar bench train --preset llama-3.2-1b --seq-lens 65536 --steps 3 $KEEP
done
run_bounded l64_alst 100 python3 bench/peers/alst_train_step.py --preset llama-3.2-1b --seq-lens 65536 --steps 3 --torch-adam
echo "done $SECONDS s"
