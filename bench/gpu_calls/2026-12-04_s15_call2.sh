#!/bin/bash
# GPU call 2 (fifteenth session): Llama-3.1-8B at 128K tokens, seqpar (optimizer offload, the host step
# overlapped with the next forward; 3 steps) beside the ALST recipe with DeepSpeed ZeRO-3 offload
# (ratio 0.3), and the GPU offload curves with gradient offload added.
#   bash bench/gpu_calls/2026-12-04_s15_call2.sh OUT_DIR
set -u
OUT=$1
. "$(dirname "$0")/build_gpu.sh"
build_gpu $OUT seqpar test_cuda
timeout 60 $B/test_cuda --gtest_filter='CudaTrain.OffloadAndStage3TrainAlike' > $OUT/test_cuda.log 2>&1
echo "test_cuda rc=$?"; grep -E "^\[  (PASSED|FAILED) |OK \]|FAILED \]|Failure" $OUT/test_cuda.log | head -12
pip install --no-index --no-deps --target /tmp/site .devtmp/whl/*.whl > $OUT/pip.log 2>&1 || tail -3 $OUT/pip.log
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH TORCH_CUDA_ARCH_LIST=9.0
t=$SECONDS
timeout 200 $B/seqpar bench train --preset llama-3.1-8b --seq-lens 131072 --activation-checkpointing --tiled-mlp-tokens 8192 \
  --tiled-loss-tokens 8192 --offload-optimizer cpu --host-memory-gib 120 --steps 3 --out $OUT/train.jsonl > $OUT/bench8b.log 2>&1
echo "seqpar 8B 128K rc=$? $((SECONDS - t)) s"; grep -E "error|memory plan|step +[0-9]/" $OUT/bench8b.log | cut -c1-200
t=$SECONDS
( while sleep 15; do echo "$((SECONDS - t)) s: host used $(free -m | awk '/Mem:/{print $3}') MiB"; done ) > $OUT/host.log 2>&1 &
W=$!
timeout 265 python3 bench/peers/alst_train_step.py --preset llama-3.1-8b --seq-lens 131072 --zero3-offload \
  --offload-ratio 0.3 --attn sdpa --steps 2 --out $OUT/train.jsonl > $OUT/alst8b.log 2>&1
echo "ALST 8B 128K rc=$? $((SECONDS - t)) s"; kill $W
grep -vE "^\s*$|Warning|warn|return func|Backend impl" $OUT/alst8b.log | tail -4 | cut -c1-400
tail -3 $OUT/host.log
cat $OUT/train.jsonl | cut -c1-1200
