#!/bin/bash
# Twenty-ninth session, whichever card comes (~480 s; carry [".devtmp"]):
# - always: the tree's attention tests (with CudnnAttention.AutoPairsBackendsPerDirection: auto's per-direction
#   pairs, sm_90 forward + cuDNN backward at D = 128 and cuDNN forward + sm_90 backward at D = 64, against
#   all-cuDNN and all-flash);
# - on an H200: issue 17's Qwen shapes beside the ALST recipe, 64K first (the ratio still short of 1.5x), then 32K,
#   as bench/gpu_calls/2026-12-06_s22_next_h200.sh PART=qwen does;
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
  test_build gpu
  peer_env $OUT
  KEEP="--activation-checkpointing --checkpoint-keep-attention --tiled-loss-tokens 8192"
  END=${END:-480}
  for s in 65536 32768; do
    for m in qwen3-1.7b qwen2.5-1.5b; do
      run_bounded ${m}_${s} 45 $B/seqpar bench train --preset $m --seq-lens $s --steps 3 $KEEP --checkpoint-placement auto
      run_bounded ${m}_${s}_alst 100 python3 bench/peers/alst_train_step.py --preset $m --seq-lens $s --steps 3 --torch-adam
    done
  done ;;
*)
  bash "$(dirname "$0")/2026-12-06_s29_auto_mix.sh" $OUT ;;
esac
echo "done $SECONDS s"
