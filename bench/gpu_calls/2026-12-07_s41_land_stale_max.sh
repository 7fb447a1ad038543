#!/bin/bash
# For the forty-first session: the tests and figures that land the stale maximum (2026-12-07_s40_stale_max2.patch:
# the sm_90 forward's stale maximum with its rare path by mma.sync, auto's own forward at D = 64, tests, docs), built
# as `sm2` beside the tree (`gpu`).
#   1. build-sm2's whole CUDA suite but the NCCL tests (the rising-scores test runs its rare path on both kernels);
#   2. the forward at D = 64 (H 32 / Hkv 8) and D = 128 (H 16 / Hkv 8): cuDNN, gpu, sm2;
#   3. Llama-3.2-1B 128K: sm2 (auto), the ALST recipe, gpu; Qwen3-1.7B 32K: sm2, the ALST recipe.
# If (1) passes: `git apply bench/gpu_calls/2026-12-07_s40_stale_max2.patch`, write the figures into the docs the patch
# touches and bench/NOTES.md, commit.
#   bash bench/gpu_calls/2026-12-07_s41_land_stale_max.sh OUT_DIR   (carry [".devtmp"]; ~560 s; prebuilt: gpu, sm2)
set -u
REAL_OUT=$1
OUT=/tmp/s41c1
mkdir -p $OUT
. "$(dirname "$0")/build_gpu.sh"
trap "pack_logs $OUT $REAL_OUT" EXIT
build_variants $OUT sm2=bench/gpu_calls/2026-12-07_s40_stale_max2.patch
peer_env $OUT
END=${END:-585}
t=$SECONDS
SEQPAR_TEST_SOURCE_DIR=$PWD SEQPAR_TEST_BINARY=$PWD/build-sm2/seqpar timeout 240 build-sm2/test_cuda \
  --gtest_filter='-*Nccl*' > $OUT/tests_sm2.log 2>&1
echo "tests sm2 rc=$? $((SECONDS - t)) s: $(grep -E '^\[  (PASSED|FAILED) ' $OUT/tests_sm2.log | tr '\n' ' ')"
grep -E "FAILED|Failure" $OUT/tests_sm2.log | head -20
attn_ms cudnn $B cudnn 64 32 fwd
attn_ms gpu $B flash 64 32 fwd
attn_ms sm2 build-sm2 flash 64 32 fwd
attn_ms cudnn $B cudnn 128 16 fwd
attn_ms gpu $B flash 128 16 fwd
attn_ms sm2 build-sm2 flash 128 16 fwd
echo "attention done $SECONDS s"
KEEP="--activation-checkpointing --checkpoint-keep-attention --tiled-loss-tokens 8192 --checkpoint-placement auto"
L1="--preset llama-3.2-1b --seq-lens 131072 --steps 3 $KEEP"
run_bounded sm2_1b_128k 60 build-sm2/seqpar bench train $L1
run_bounded alst_1b_128k 130 python3 bench/peers/alst_train_step.py --preset llama-3.2-1b --seq-lens 131072 --steps 3 --torch-adam
run_bounded gpu_1b_128k 60 $B/seqpar bench train $L1
Q3="--preset qwen3-1.7b --seq-lens 32768 --steps 4 $KEEP"
run_bounded sm2_q3 40 build-sm2/seqpar bench train $Q3
run_bounded alst_q3 80 python3 bench/peers/alst_train_step.py --preset qwen3-1.7b --seq-lens 32768 --steps 3 --torch-adam
run_bounded sm2_q3b 40 build-sm2/seqpar bench train $Q3
echo "done $SECONDS s"
