#!/bin/bash
# Fortieth session, call 1: the thirty-ninth session's call (2026-12-07_s39_head_norm_rope.sh: Qwen3's head norm and
# RoPE in one pass, `gpu`, beside `un`, the same tree running the two ops) and the stale maximum in the forward
# (`sm`, 2026-12-07_s40_stale_max.patch: tiles after a row's first are exponentiated against its maximum as it stands,
# without the tile's maximum, unless a sum says it rose too far) in one call.
#   1. the GPU tests of the tree (the op harness with head_norm_rope, CudaModel.* with the Qwen fixtures,
#      CudaTrain.FirstStepsMatchTheCpu) and, at the same time, the attention tests of sm;
#   2. the forward at D = 64 (H 32 / Hkv 8: Llama-3.2-1B) and D = 128 (H 16 / Hkv 8: Qwen3-1.7B), cuDNN, gpu, sm, two
#      rounds; forward+backward at D = 64;
#   3. Qwen3-1.7B 32K steps gpu / un / ALST recipe;
#   4. Llama-3.2-1B 128K: sm with the own forward, the ALST recipe, gpu (auto: cuDNN's forward);
#   5. as the time allows: Qwen3-1.7B 32K gpu / un again, a profiled step of each.
#   bash bench/gpu_calls/2026-12-07_s40_call1.sh OUT_DIR   (carry [".devtmp"]; ~590 s; prebuilt: gpu, un, sm)
set -u
REAL_OUT=$1
OUT=/tmp/s40c1
mkdir -p $OUT
. "$(dirname "$0")/build_gpu.sh"
trap "pack_logs $OUT $REAL_OUT" EXIT
build_variants $OUT un=bench/gpu_calls/2026-12-07_s39_unfused.patch sm=bench/gpu_calls/2026-12-07_s40_stale_max.patch
peer_env $OUT
END=${END:-585}
run_tests 170 'CudaOpHarness.EveryOpOnEveryCudaPath:CudaModel.*:CudaTrain.FirstStepsMatchTheCpu:CudaAttentionSm90.*' > $OUT/t_gpu.txt 2>&1 &
test_builds sm
wait
cat $OUT/t_gpu.txt
echo "tests done $SECONDS s"
for r in 1 2; do
  attn_ms cudnn $B cudnn 64 32 fwd
  attn_ms gpu $B flash 64 32 fwd
  [[ $PASSED == *build-sm* ]] && attn_ms sm build-sm flash 64 32 fwd
  attn_ms cudnn $B cudnn 128 16 fwd
  attn_ms gpu $B flash 128 16 fwd
  [[ $PASSED == *build-sm* ]] && attn_ms sm build-sm flash 128 16 fwd
done
attn_ms gpu $B flash 64 32 fwd_bwd
[[ $PASSED == *build-sm* ]] && attn_ms sm build-sm flash 64 32 fwd_bwd
echo "attention done $SECONDS s"
KEEP="--activation-checkpointing --checkpoint-keep-attention --tiled-loss-tokens 8192 --checkpoint-placement auto"
Q3="--preset qwen3-1.7b --seq-lens 32768 --steps 4 $KEEP"
run_bounded q3_gpu 40 $B/seqpar bench train $Q3
run_bounded q3_un 40 build-un/seqpar bench train $Q3
run_bounded alst_q3_32k 80 python3 bench/peers/alst_train_step.py --preset qwen3-1.7b --seq-lens 32768 --steps 3 --torch-adam
L1="--preset llama-3.2-1b --seq-lens 131072 --steps 3 $KEEP"
[[ $PASSED == *build-sm* ]] && run_bounded sm_1b_128k 60 build-sm/seqpar bench train $L1 --attn-implementation flash_attention_2
run_bounded alst_1b_128k 130 python3 bench/peers/alst_train_step.py --preset llama-3.2-1b --seq-lens 131072 --steps 3 --torch-adam
run_bounded gpu_1b_128k 60 $B/seqpar bench train $L1
run_bounded q3_gpu2 40 $B/seqpar bench train $Q3
run_bounded q3_un2 40 build-un/seqpar bench train $Q3
for b in gpu un; do
  bin=$B; [ $b = un ] && bin=build-un
  run_bounded q3_prof_$b 35 $bin/seqpar bench train --preset qwen3-1.7b --seq-lens 32768 --steps 2 $KEEP --profile
  grep -A60 "^profile" $OUT/q3_prof_$b.log > $REAL_OUT/q3_prof_$b.txt 2> /dev/null
  grep -E "head_norm|rope|rmsnorm|^profile|step" $REAL_OUT/q3_prof_$b.txt | head -12
done
echo "done $SECONDS s"
