#!/bin/bash
# Thirty-seventh session, call 1: the SwiGLU backward in place with h computed again (`hd` =
# 2026-12-07_s37_swiglu_h_again.patch: the thirty-sixth session's in-place d(gate), d(up) over gate, up, and h =
# silu(gate) * up no longer kept from the forward to the backward but written over dh by the backward's one
# elementwise pass; the plan follows). Its kernel, op-harness, model and training tests; the peaks beside their plans
# of the shapes tests/train/test_memory_plan.cpp locks to measurements (Llama-3.2-1B 64K / 128K keeping attention,
# no placement; Qwen3-1.7B / Qwen2.5-1.5B at 32K / 64K with auto's placement on this card); Llama-3.2-1B 64K steps
# with auto's placement on hd and on main beside the ALST recipe.
#   bash bench/gpu_calls/2026-12-07_s37_call1.sh OUT_DIR   (carry [".devtmp"]; ~520 s)
# Prebuilt: tools/prebuild_gpu.sh gpu (main); tools/prebuild_gpu.sh hd with the patch applied to the tree.
set -u
REAL_OUT=$1
OUT=/tmp/s37c1
mkdir -p $OUT
. "$(dirname "$0")/build_gpu.sh"
trap "pack_logs $OUT $REAL_OUT" EXIT
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
build_variants $OUT hd=bench/gpu_calls/2026-12-07_s37_swiglu_h_again.patch
SEQPAR_TEST_SOURCE_DIR=$PWD SEQPAR_TEST_BINARY=$PWD/build-hd/seqpar timeout 200 build-hd/test_cuda \
  --gtest_filter='CudaOps.Swiglu*:CudaOpHarness.EveryOpOnEveryCudaPath:CudaModel.FwdBwdMatchesHuggingFaceInBf16:CudaModel.CudnnAttentionMatchesHuggingFace:CudaModel.ActivationCheckpointingMatchesKeepingActivations:CudaTrain.FirstStepsMatchTheCpu:CudaTrain.MemoryLeversTrainAlike:CudaTrain.OffloadAndStage3TrainAlike' \
  > $OUT/hd_tests.log 2>&1
echo "hd tests rc=$? $SECONDS s: $(grep -E '^\[  (PASSED|FAILED) ' $OUT/hd_tests.log | tr '\n' ' ')"
grep -E "FAILED|Failure" -A4 $OUT/hd_tests.log | head -30
KEEP="--activation-checkpointing --checkpoint-keep-attention --tiled-loss-tokens 8192"
peer_env $OUT
END=${END:-575}
run_bounded hd_1b_64k_auto 40 build-hd/seqpar bench train --preset llama-3.2-1b --seq-lens 65536 --steps 3 $KEEP \
  --checkpoint-placement auto
run_bounded gpu_1b_64k_auto 40 $B/seqpar bench train --preset llama-3.2-1b --seq-lens 65536 --steps 3 $KEEP \
  --checkpoint-placement auto
run_bounded alst_1b_64k 90 python3 bench/peers/alst_train_step.py --preset llama-3.2-1b --seq-lens 65536 --steps 3 --torch-adam
run_bounded hd_1b_64k_auto_b 40 build-hd/seqpar bench train --preset llama-3.2-1b --seq-lens 65536 --steps 3 $KEEP \
  --checkpoint-placement auto
run_bounded hd_1b_64k 35 build-hd/seqpar bench train --preset llama-3.2-1b --seq-lens 65536 --steps 2 $KEEP
run_bounded hd_1b_128k 55 build-hd/seqpar bench train --preset llama-3.2-1b --seq-lens 131072 --steps 2 $KEEP
for m in qwen3-1.7b qwen2.5-1.5b; do
  run_bounded hd_${m}_32k_auto 40 build-hd/seqpar bench train --preset $m --seq-lens 32768 --steps 2 $KEEP \
    --checkpoint-placement auto
done
for m in qwen3-1.7b qwen2.5-1.5b; do
  run_bounded hd_${m}_64k_auto 60 build-hd/seqpar bench train --preset $m --seq-lens 65536 --steps 2 $KEEP \
    --checkpoint-placement auto
done
echo "done $SECONDS s"
