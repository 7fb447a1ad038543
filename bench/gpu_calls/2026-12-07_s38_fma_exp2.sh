#!/bin/bash
# Thirty-eighth session, call 1: the D = 64 forward with part of its exponentials on the FMA pipe (fma_exp2,
# attn_common.cuh; FlashAttention-4's polynomial 2^x). At D = 64 a 64 x 128 tile of S is as many cycles of an SM's MUFU
# unit (8192 ex2 over 16 lanes) as of its tensor cores (2 x 64 x 128 x 64 x 2 FLOP over 4096 a cycle), and the own
# D = 64 forward is 0.90-0.92x / 0.97x cuDNN's at 16K / 64K (issue 15's remaining kernel gap; auto runs cuDNN's
# forward at D = 64 because of it). Variants: e4 (every 4th column block of a tile with no masked element: 1/4 of the
# exponentials), e2 (1/2), e8 (1/8); the default build is main.
#   1. the attention tests of e4 and e2 (both at once);
#   2. the D = 64 forward at H 32 / Hkv 8 (Llama-3.2-1B) and H 16: cuDNN, main, e8, e4, e2, two rounds; 128K forward;
#      forward+backward of cuDNN, main and e4;
#   3. Llama-3.2-1B 128K steps: main (auto: cuDNN forward, own backward), e4 with --attn-implementation flash_attention_2 (own
#      kernel both ways), the ALST recipe; what the time left allows.
#   bash bench/gpu_calls/2026-12-07_s38_fma_exp2.sh OUT_DIR   (carry [".devtmp"]; ~450 s)
# Prebuilt: tools/prebuild_gpu.sh gpu; tools/prebuild_gpu.sh eN bench/gpu_calls/2026-12-07_s38_fma_exp2_eN.patch.
set -u
REAL_OUT=$1
OUT=/tmp/s38c1
mkdir -p $OUT
. "$(dirname "$0")/build_gpu.sh"
trap "pack_logs $OUT $REAL_OUT" EXIT
P=bench/gpu_calls/2026-12-07_s38_fma_exp2
build_variants $OUT e4=${P}_e4.patch e2=${P}_e2.patch e8=${P}_e8.patch
peer_env $OUT
END=${END:-560}
test_builds e4 e2
echo "tests done $SECONDS s"
for r in 1 2; do
  for H in 32 16; do
    attn_ms cudnn $B cudnn 64 $H fwd
    for v in $B build-e8 build-e4 build-e2; do attn_ms $v $v flash 64 $H fwd; done
  done
done
for v in cudnn:$B flash:$B flash:build-e4 flash:build-e2 cudnn:$B; do
  $(echo ${v#*:})/seqpar bench attention --backend ${v%%:*} --seq-lens 131072 --passes fwd --heads 32 --kv-heads 8 \
    --head-dims 64 --warmup 1 --iters 3 2>&1 | grep -o '"ms": *[0-9.]*' | tr '\n' ' ' | sed "s|^|128K fwd $v: |"; echo
done
attn_ms cudnn $B cudnn 64 32 fwd_bwd; attn_ms main $B flash 64 32 fwd_bwd; attn_ms e4 build-e4 flash 64 32 fwd_bwd
echo "attention done $SECONDS s"
KEEP="--activation-checkpointing --checkpoint-keep-attention --tiled-loss-tokens 8192 --checkpoint-placement auto"
run_bounded e4_1b_128k 60 build-e4/seqpar bench train --preset llama-3.2-1b --seq-lens 131072 --steps 3 $KEEP \
  --attn-implementation flash_attention_2
run_bounded gpu_1b_128k 60 $B/seqpar bench train --preset llama-3.2-1b --seq-lens 131072 --steps 3 $KEEP
run_bounded alst_1b_128k 130 python3 bench/peers/alst_train_step.py --preset llama-3.2-1b --seq-lens 131072 --steps 3 --torch-adam
run_bounded e4_1b_128k_2 60 build-e4/seqpar bench train --preset llama-3.2-1b --seq-lens 131072 --steps 3 $KEEP \
  --attn-implementation flash_attention_2
echo "done $SECONDS s"
