#!/bin/bash
# Fortieth session, call 2 (right after call 1, on the same machine): Llama-3.2-1B at 128K with the stale-maximum build
# (`sm`, own kernel both ways: --attn-implementation flash_attention_2) and the default build beside the ALST recipe,
# then issue 15's Llama-3.2-3B at 64K beside the ALST recipe (measured only on H100s so far), then, as the time
# allows, Llama-3.2-1B at 64K beside transformers as HF Trainer runs it (issue 15 asks >= 1.6x where it fits).
#   END=SECONDS bash bench/gpu_calls/2026-12-07_s40_call2.sh OUT_DIR   (carry [".devtmp"]; ~430 s; prebuilt: gpu, sm)
set -u
REAL_OUT=$1
OUT=/tmp/s40c2
mkdir -p $OUT
. "$(dirname "$0")/build_gpu.sh"
trap "pack_logs $OUT $REAL_OUT" EXIT
build_variants $OUT sm=bench/gpu_calls/2026-12-07_s40_stale_max.patch
peer_env $OUT
END=${END:-585}
KEEP="--activation-checkpointing --checkpoint-keep-attention --tiled-loss-tokens 8192 --checkpoint-placement auto"
L1="--preset llama-3.2-1b --seq-lens 131072 --steps 3 $KEEP"
run_bounded sm_1b_128k 60 build-sm/seqpar bench train $L1 --attn-implementation flash_attention_2
run_bounded alst_1b_128k 130 python3 bench/peers/alst_train_step.py --preset llama-3.2-1b --seq-lens 131072 --steps 3 --torch-adam
run_bounded l3_64k 70 $B/seqpar bench train --preset llama-3.2-3b --seq-lens 65536 --steps 4 $KEEP
run_bounded alst_l3_64k 150 python3 bench/peers/alst_train_step.py --preset llama-3.2-3b --seq-lens 65536 --steps 3 --torch-adam
run_bounded l1_64k 40 $B/seqpar bench train --preset llama-3.2-1b --seq-lens 65536 --steps 4 $KEEP
run_bounded hf_l1_64k 100 python3 bench/peers/hf_train_step.py --preset llama-3.2-1b --seq-lens 65536 --steps 3 --gradient-checkpointing
echo "done $SECONDS s"
