#!/bin/bash
# Thirty-seventh session, call 2: `hd2` = call 1's `hd` (SwiGLU backward in place, h computed again) plus the plan's
# forward phase without the final norm's activations while a layer runs (2026-12-07_s37_swiglu_h_again2.patch), so
# auto's placement has more 'f' layers. The peaks beside their plans of the Llama-3.2-1B shapes
# tests/train/test_memory_plan.cpp locks (8K / 32K keeping every activation; checkpointing with a 4096-token loss tile;
# and keeping attention); the 1B at 128K (auto's placement: 11g5f on an H100, main's 13g3f) and Qwen3-1.7B at 32K with
# auto's placement on hd2 and on main beside the ALST recipe (what the time left allows, in that order).
#   bash bench/gpu_calls/2026-12-07_s37_call2.sh OUT_DIR   (carry [".devtmp"]; ~430 s at most)
# Prebuilt: tools/prebuild_gpu.sh gpu (main); tools/prebuild_gpu.sh hd2 with the patch applied to the tree.
set -u
REAL_OUT=$1
OUT=/tmp/s37c2
mkdir -p $OUT
. "$(dirname "$0")/build_gpu.sh"
trap "pack_logs $OUT $REAL_OUT" EXIT
build_variants $OUT hd2=bench/gpu_calls/2026-12-07_s37_swiglu_h_again2.patch
peer_env $OUT
END=${END:-430}
H=build-hd2/seqpar
run_bounded p8k 25 $H bench train --preset llama-3.2-1b --seq-lens 8192 --steps 2
run_bounded p32k 30 $H bench train --preset llama-3.2-1b --seq-lens 32768 --steps 2
run_bounded p8k_ck 25 $H bench train --preset llama-3.2-1b --seq-lens 8192 --steps 2 --activation-checkpointing \
  --tiled-loss-tokens 4096
run_bounded p32k_ck 30 $H bench train --preset llama-3.2-1b --seq-lens 32768 --steps 2 --activation-checkpointing \
  --tiled-loss-tokens 4096
run_bounded p32k_ka 30 $H bench train --preset llama-3.2-1b --seq-lens 32768 --steps 2 --activation-checkpointing \
  --checkpoint-keep-attention --tiled-loss-tokens 4096
KEEP="--activation-checkpointing --checkpoint-keep-attention --tiled-loss-tokens 8192 --checkpoint-placement auto"
run_bounded hd2_1b_128k 60 $H bench train --preset llama-3.2-1b --seq-lens 131072 --steps 3 $KEEP
run_bounded gpu_1b_128k 60 $B/seqpar bench train --preset llama-3.2-1b --seq-lens 131072 --steps 3 $KEEP
run_bounded alst_1b_128k 130 python3 bench/peers/alst_train_step.py --preset llama-3.2-1b --seq-lens 131072 --steps 3 --torch-adam
run_bounded hd2_q3_32k 35 $H bench train --preset qwen3-1.7b --seq-lens 32768 --steps 4 $KEEP
run_bounded gpu_q3_32k 35 $B/seqpar bench train --preset qwen3-1.7b --seq-lens 32768 --steps 4 $KEEP
run_bounded alst_q3_32k 80 python3 bench/peers/alst_train_step.py --preset qwen3-1.7b --seq-lens 32768 --steps 3 --torch-adam
echo "done $SECONDS s"
