#!/bin/bash
# Thirty-ninth session, call 1: Qwen3's head norm and RoPE in one pass (head_norm_rope.cu). The tree's build (`gpu`,
# fused) beside `un` (2026-12-07_s39_unfused.patch: the same tree running the two ops one after the other, as before),
# then the ALST recipe in the same call: Qwen3-1.7B at 32K (issue 17: 1.479x on the H200 last session), a profiled step
# of each build, and Qwen3-1.7B 64K as far as the time allows.
#   bash bench/gpu_calls/2026-12-07_s39_head_norm_rope.sh OUT_DIR   (carry [".devtmp"]; ~560 s; prebuilt: gpu, un)
set -u
REAL_OUT=$1
OUT=/tmp/s39c1
mkdir -p $OUT
. "$(dirname "$0")/build_gpu.sh"
trap "pack_logs $OUT $REAL_OUT" EXIT
build_variants $OUT un=bench/gpu_calls/2026-12-07_s39_unfused.patch
peer_env $OUT
END=${END:-570}
run_tests 260 'CudaOpHarness.EveryOpOnEveryCudaPath:CudaModel.*:CudaTrain.FirstStepsMatchTheCpu'
KEEP="--activation-checkpointing --checkpoint-keep-attention --tiled-loss-tokens 8192 --checkpoint-placement auto"
Q3="--preset qwen3-1.7b --seq-lens 32768 --steps 4 $KEEP"
run_bounded q3_gpu 40 $B/seqpar bench train $Q3
run_bounded q3_un 40 build-un/seqpar bench train $Q3
run_bounded alst_q3_32k 80 python3 bench/peers/alst_train_step.py --preset qwen3-1.7b --seq-lens 32768 --steps 3 --torch-adam
run_bounded q3_gpu2 40 $B/seqpar bench train $Q3
run_bounded q3_un2 40 build-un/seqpar bench train $Q3
for b in gpu un; do
  bin=$B; [ $b = un ] && bin=build-un
  run_bounded q3_prof_$b 40 $bin/seqpar bench train --preset qwen3-1.7b --seq-lens 32768 --steps 3 $KEEP --profile
  grep -A60 "^profile" $OUT/q3_prof_$b.log > $REAL_OUT/q3_prof_$b.txt
  grep -E "head_norm|rope|rmsnorm|^profile|step" $REAL_OUT/q3_prof_$b.txt | head -12
done
run_bounded q3_64k_gpu 60 $B/seqpar bench train --preset qwen3-1.7b --seq-lens 65536 --steps 3 $KEEP
run_bounded alst_q3_64k 120 python3 bench/peers/alst_train_step.py --preset qwen3-1.7b --seq-lens 65536 --steps 3 --torch-adam
echo "done $SECONDS s"
