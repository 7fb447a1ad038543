#!/bin/bash
# Twenty-ninth session, whichever card comes (~520-560 s; carry [".devtmp"]):
# - always: the tree's attention tests (with CudnnAttention.AutoPairsBackendsPerDirection: auto's per-direction
#   pairs, sm_90 forward + cuDNN backward at D = 128 and cuDNN forward + sm_90 backward at D = 64, against
#   all-cuDNN and all-flash);
# - on an H200: issue 17's Qwen shapes at one length (PART=64, the default, then PART=32 SKIPTESTS=1 in a second
#   call), each beside the ALST recipe, then beside transformers (sdpa, gradient checkpointing);
# - on an H100: bench/gpu_calls/2026-12-06_s29_auto_mix.sh's attention table and training steps beside e14e165.
#   bash bench/gpu_calls/2026-12-06_s29_either.sh OUT_DIR
set -u
OUT=$1
. "$(dirname "$0")/build_gpu.sh"
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader)
echo "$GPU"
case "$GPU" in
*H200*)
  build_gpu $OUT seqpar test_cuda
  [ "${SKIPTESTS:-0}" = 1 ] || test_build gpu
  peer_env $OUT
  KEEP="--activation-checkpointing --checkpoint-keep-attention --tiled-loss-tokens 8192"
  END=${END:-560}
  # PART=64 (default) or 32: one length per call, each model beside the ALST recipe and transformers (sdpa,
  # gradient checkpointing), as issue 17 asks; ~500 s at 64K.
  s=$(( ${PART:-64} * 1024 ))
  for m in qwen3-1.7b qwen2.5-1.5b; do
    run_bounded ${m}_${s} 45 $B/seqpar bench train --preset $m --seq-lens $s --steps 3 $KEEP --checkpoint-placement auto
    run_bounded ${m}_${s}_alst 100 python3 bench/peers/alst_train_step.py --preset $m --seq-lens $s --steps 3 --torch-adam
  done
  for m in qwen3-1.7b qwen2.5-1.5b; do
    run_bounded ${m}_${s}_hf 90 python3 bench/peers/hf_train_step.py --preset $m --seq-lens $s --steps 3 --gradient-checkpointing
  done ;;
*)
  bash "$(dirname "$0")/2026-12-06_s29_auto_mix.sh" $OUT ;;
esac
echo "done $SECONDS s"
