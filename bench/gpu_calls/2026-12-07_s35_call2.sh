#!/bin/bash
# Thirty-fifth session, call 2: the landed backward (dQ one step late, 57ee73d) under the attention tests, beside `ed`
# (2026-12-07_s35_early_dv.patch: at D = 128 dV's product issued before dP^T is waited for; the twenty-eighth and
# thirty-first sessions found it level when the warpgroups met every step). Then Llama-3.2-1B at 64K (auto runs the
# own backward at D = 64) beside the ALST recipe, same call, and, if ed passed, Qwen3-1.7B 32K on ed's own kernel.
#   bash bench/gpu_calls/2026-12-07_s35_call2.sh OUT_DIR   (carry [".devtmp"]; ~480 s; END=… bounds the steps)
# Prebuilt: tools/prebuild_gpu.sh gpu; tools/prebuild_gpu.sh ed bench/gpu_calls/2026-12-07_s35_early_dv.patch
set -u
OUT=$1
. "$(dirname "$0")/build_gpu.sh"
build_variants $OUT ed=bench/gpu_calls/2026-12-07_s35_early_dv.patch
OK=""
timeout 30 build-ed/seqpar bench attention --backend flash --seq-lens 16384 --passes fwd_bwd --heads 16 --kv-heads 8 \
  --head-dims 128 --warmup 0 --iters 1 > $OUT/smoke_ed.log 2>&1 && OK=build-ed || echo "ed smoke rc=$?"
for round in 1 2; do
  for H in 16 32; do
    attn_ms cudnn $B cudnn 128 $H fwd_bwd
    for bin in $B $OK; do attn_ms $bin $bin flash 128 $H fwd_bwd; done
  done
done
# the forward alone (the backward alone is forward+backward minus forward), D = 128 and 64
for D in 128 64; do
  attn_ms cudnn $B cudnn $D 16 fwd
  attn_ms $B $B flash $D 16 fwd
done
attn_ms cudnn $B cudnn 64 32 fwd
attn_ms $B $B flash 64 32 fwd
echo "timed $SECONDS s"
if [ -n "$OK" ]; then test_builds gpu ed; else test_builds gpu; fi
echo "tests done $SECONDS s, passed:$PASSED"
KEEP="--activation-checkpointing --checkpoint-keep-attention --tiled-loss-tokens 8192 --checkpoint-placement auto"
peer_env $OUT
run_bounded l1_a 60 $B/seqpar bench train --preset llama-3.2-1b --seq-lens 65536 --steps 3 $KEEP
run_bounded l1_alst 150 python3 bench/peers/alst_train_step.py --preset llama-3.2-1b --seq-lens 65536 --steps 3 --torch-adam
run_bounded l1_b 60 $B/seqpar bench train --preset llama-3.2-1b --seq-lens 65536 --steps 3 $KEEP
if [[ " $PASSED " == *" build-ed "* ]]; then
  run_bounded q3_auto 50 $B/seqpar bench train --preset qwen3-1.7b --seq-lens 32768 --steps 4 $KEEP
  run_bounded q3_own 50 $B/seqpar bench train --preset qwen3-1.7b --seq-lens 32768 --steps 4 $KEEP \
    --attn-implementation flash_attention_3
  run_bounded q3_ed 50 build-ed/seqpar bench train --preset qwen3-1.7b --seq-lens 32768 --steps 4 $KEEP \
    --attn-implementation flash_attention_3
fi
echo "done $SECONDS s"
