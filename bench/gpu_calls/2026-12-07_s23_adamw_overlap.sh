#!/bin/bash
# For the next GPU call (written in the twenty-third session, not run): the device AdamW step overlapped with
# the next step's forward (AdamW::step_device_overlapped, commit a3e92db): CudaTrain.* (the new check of the
# device-overlapped step against the blocking one, bit for bit, among them), then Qwen3-1.7B and Llama-3.2-1B
# steps with the commit before it (.devtmp/base_adamw, a `git archive` of a3e92db~1) in the same call.
# About 330 s.
#   bash bench/gpu_calls/2026-12-07_s23_adamw_overlap.sh OUT_DIR
set -u
OUT=$1
. "$(dirname "$0")/build_gpu.sh"
build_gpu $OUT seqpar test_cuda
build_other base .devtmp/base_adamw "" seqpar
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
run_tests 150 'CudaTrain.*'
KEEP="--activation-checkpointing --checkpoint-keep-attention --tiled-loss-tokens 8192"
END=580
for bin in build-base $B build-base $B; do
  tag=$([ $bin = build-base ] && echo base || echo new)
  run_bounded q3_$tag 45 $bin/seqpar bench train --preset qwen3-1.7b --seq-lens 32768 --steps 4 $KEEP --checkpoint-placement auto
  run_bounded q3_16k_$tag 30 $bin/seqpar bench train --preset qwen3-1.7b --seq-lens 16384 --steps 4 $KEEP --checkpoint-placement auto
done
run_bounded l1b_new 45 $B/seqpar bench train --preset llama-3.2-1b --seq-lens 65536 --steps 3 $KEEP --profile
grep -E "adamw|^profile" $OUT/l1b_new.log
echo "done $SECONDS s"
