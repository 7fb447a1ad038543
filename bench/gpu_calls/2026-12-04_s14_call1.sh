#!/bin/bash
# GPU call 1 (fourteenth session): the offload queue's change (a taken tensor no longer held; a
# prefetch of a tensor whose copy out is unfinished adopts it) and per-layer input placement on the
# GPU; then the Llama-3.2-1B shape at 128K with checkpoint offload beside the ALST recipe in the
# same call (does the step-2 peak now equal step 1's and the plan's?).
#   bash bench/gpu_calls/2026-12-04_s14_call1.sh OUT_DIR
set -u
OUT=$1
. "$(dirname "$0")/build_gpu.sh"
build_gpu $OUT seqpar test_cuda
t=$SECONDS
timeout 150 $B/test_cuda --gtest_filter='CudaOffload.*:CudaTrain.MemoryLevers*:CudaTrain.OffloadAndStage3*' > $OUT/test_cuda.log 2>&1
echo "test_cuda (offload, levers) rc=$? $((SECONDS - t)) s"; grep -E "^\[  (PASSED|FAILED) |Failure|^\[       OK" $OUT/test_cuda.log | head -12
pip install --no-index --no-deps --target /tmp/site .devtmp/whl/*.whl > $OUT/pip.log 2>&1 || tail -3 $OUT/pip.log
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH TORCH_CUDA_ARCH_LIST=9.0
$B/seqpar plan --preset llama-3.2-1b --seq-len 131072 --activation-checkpointing --checkpoint-offload \
  --tiled-mlp-tokens 8192 --tiled-loss-tokens 8192 --host-memory-gib 120 > $OUT/plan1b.txt 2>&1
grep -E "peak|<-" $OUT/plan1b.txt
t=$SECONDS
timeout 90 $B/seqpar bench train --preset llama-3.2-1b --seq-lens 131072 --activation-checkpointing --checkpoint-offload \
  --tiled-mlp-tokens 8192 --tiled-loss-tokens 8192 --host-memory-gib 120 --steps 3 --log-level debug \
  --out $OUT/train.jsonl > $OUT/bench1b.log 2>&1
echo "seqpar 1B 128K offload sdpa rc=$? $((SECONDS - t)) s"; grep -E "error|step +[0-9]/|in use|peak" $OUT/bench1b.log | cut -c1-220 | tail -12
t=$SECONDS
timeout 240 python3 bench/peers/alst_train_step.py --preset llama-3.2-1b --seq-lens 131072 --attn sdpa --steps 3 \
  --out $OUT/train.jsonl > $OUT/alst1b.log 2>&1; echo "ALST 1B rc=$? $((SECONDS - t)) s"
grep -vE "^\s*$|Warning|warn|return func|Backend impl" $OUT/alst1b.log | tail -4 | cut -c1-300
cat $OUT/train.jsonl | cut -c1-1200
