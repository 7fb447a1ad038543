#!/bin/bash
# For the next GPU call (written in the twenty-fourth session, not run). PART=3b (default): issue 15's
# Llama-3.2-3B at 64K keeping attention with the optimizer offloaded, `auto` placement, five steps, so that
# bench's figure (now the steps between the first and the last) is the steady step, beside the ALST recipe;
# and the 1B at 64K in today's mode beside it. PART=ncu: where the sm_90 kernels wait now that the D = 64
# backward's dQ goes through the writer (2026-12-07_s23_ncu_source.sh). About 420 s for 3b.
#   bash bench/gpu_calls/2026-12-06_s24_next.sh OUT_DIR
set -u
OUT=$1
if [ "${PART:-3b}" = ncu ]; then exec bash "$(dirname "$0")/2026-12-07_s23_ncu_source.sh" "$OUT"; fi
. "$(dirname "$0")/build_gpu.sh"
build_gpu $OUT seqpar
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
peer_env $OUT
KEEP="--activation-checkpointing --checkpoint-keep-attention --tiled-loss-tokens 8192"
run_bounded b3_64_auto_off 90 $B/seqpar bench train --preset llama-3.2-3b --seq-lens 65536 --steps 5 $KEEP \
  --offload-optimizer cpu --checkpoint-placement auto
run_bounded b3_64_alst 130 python3 bench/peers/alst_train_step.py --preset llama-3.2-3b --seq-lens 65536 --steps 3 --torch-adam
run_bounded l1b_64_keep 60 $B/seqpar bench train --preset llama-3.2-1b --seq-lens 65536 --steps 4 $KEEP
run_bounded l1b_64_alst 100 python3 bench/peers/alst_train_step.py --preset llama-3.2-1b --seq-lens 65536 --steps 3 --torch-adam
grep "step .*/5" $OUT/b3_64_auto_off.log
echo "done $SECONDS s"
