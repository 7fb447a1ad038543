#!/bin/bash
# GPU call 1 (sixteenth session): the offloaded optimizer's CPU AdamW vectorised (AVX-512/AVX2 clones;
# the old loop did not vectorise), its bf16 rounding fused into the same pass, its threads started once.
# The GPU tests of the offloaded step; `seqpar bench host-adamw` per thread count; Llama-3.1-8B at 64K
# (4 steps, as call 1 of the fifteenth session: 19.98 s median, ~8 s host step) beside the ALST recipe
# with DeepSpeed ZeRO-3 offload; then DeepSpeed's CPU Adam and torch's fused CPU AdamW on the same
# element count as seqpar's host-adamw.
#   bash bench/gpu_calls/2026-12-04_s16_call1.sh OUT_DIR
set -u
OUT=$1
. "$(dirname "$0")/build_gpu.sh"
build_gpu $OUT seqpar test_cuda
timeout 100 $B/test_cuda --gtest_filter='CudaTrain.OverlappedOptimizerStepIsTheBlockingStep:CudaTrain.OffloadAndStage3TrainAlike' \
  > $OUT/test_cuda.log 2>&1
echo "test_cuda rc=$?"; grep -E "^\[  (PASSED|FAILED) |OK \]|FAILED \]|Failure" $OUT/test_cuda.log | head -12
lscpu | grep -E "Model name|^CPU\(s\)|NUMA node\(s\)|L3" | tr -s ' '
t=$SECONDS
timeout 60 $B/seqpar bench host-adamw --params 536870912 --threads 1,4,8,16 --steps 3 --out $OUT/adamw.jsonl > $OUT/adamw.log 2>&1
echo "host-adamw rc=$? $((SECONDS - t)) s"
pip install --no-index --no-deps --target /tmp/site .devtmp/whl/*.whl > $OUT/pip.log 2>&1 || tail -3 $OUT/pip.log
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH TORCH_CUDA_ARCH_LIST=9.0
t=$SECONDS
timeout 150 $B/seqpar bench train --preset llama-3.1-8b --seq-lens 65536 --activation-checkpointing --tiled-mlp-tokens 8192 \
  --tiled-loss-tokens 8192 --offload-optimizer cpu --host-memory-gib 120 --steps 4 --out $OUT/train.jsonl > $OUT/bench8b.log 2>&1
echo "seqpar 8B 64K rc=$? $((SECONDS - t)) s"; grep -E "error|step +[0-9]/" $OUT/bench8b.log | cut -c1-200
t=$SECONDS
timeout 230 python3 bench/peers/alst_train_step.py --preset llama-3.1-8b --seq-lens 65536 --zero3-offload \
  --offload-ratio 0.3 --attn sdpa --steps 2 --out $OUT/train.jsonl > $OUT/alst8b.log 2>&1
echo "ALST 8B rc=$? $((SECONDS - t)) s"
grep -vE "^\s*$|Warning|warn|return func|Backend impl" $OUT/alst8b.log | tail -3 | cut -c1-300
t=$SECONDS
timeout 90 python3 bench/peers/cpu_adam_step.py --params 536870912 --threads 16 --steps 3 --out $OUT/adamw.jsonl \
  > $OUT/cpu_adam.log 2>&1
echo "cpu_adam peers rc=$? $((SECONDS - t)) s"
cat $OUT/adamw.jsonl | cut -c1-400
cat $OUT/train.jsonl | cut -c1-1200
