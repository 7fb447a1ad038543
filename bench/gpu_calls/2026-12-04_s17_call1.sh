#!/bin/bash
# GPU call 1 (seventeenth session): keeping attention keeps its output and LSE only on one rank
# (backward projects q, k, v again: LocalAttention::release_inputs), 2.5 -> 1.0 GiB a layer at the 8B
# shape's 128K, so every layer of Llama-3.1-8B keeps its attention at 128K on one H200 (plan 119.4 GiB).
# Llama-3.1-8B at 128K with --checkpoint-keep-attention beside the ALST recipe with DeepSpeed ZeRO-3
# offload (fifteenth session call 2: seqpar 49.4 s step 2 without keeping attention, ALST 67.3 s);
# the 1B 32K keep-attention point of MemoryPlan.MatchesTheH200Measurements; the GPU tests of the mode.
#   bash bench/gpu_calls/2026-12-04_s17_call1.sh OUT_DIR
set -u
OUT=$1
. "$(dirname "$0")/build_gpu.sh"
build_gpu $OUT seqpar test_cuda
peer_env $OUT
t=$SECONDS
timeout 200 $B/seqpar bench train --preset llama-3.1-8b --seq-lens 131072 --activation-checkpointing \
  --checkpoint-keep-attention --tiled-mlp-tokens 8192 --tiled-loss-tokens 8192 --offload-optimizer cpu \
  --host-memory-gib 120 --steps 3 --out $OUT/train.jsonl > $OUT/bench8b.log 2>&1
echo "seqpar 8B 128K keep-attention rc=$? $((SECONDS - t)) s"; grep -E "error|memory plan|step +[0-9]/" $OUT/bench8b.log | cut -c1-200
t=$SECONDS
timeout 265 python3 bench/peers/alst_train_step.py --preset llama-3.1-8b --seq-lens 131072 --zero3-offload \
  --offload-ratio 0.3 --attn sdpa --steps 2 --out $OUT/train.jsonl > $OUT/alst8b.log 2>&1
echo "ALST 8B 128K rc=$? $((SECONDS - t)) s"
grep -vE "^\s*$|Warning|warn|return func|Backend impl" $OUT/alst8b.log | tail -3 | cut -c1-400
t=$SECONDS
timeout 45 $B/seqpar bench train --preset llama-3.2-1b --seq-lens 32768 --activation-checkpointing \
  --checkpoint-keep-attention --tiled-loss-tokens 4096 --steps 3 --out $OUT/train.jsonl > $OUT/bench1b.log 2>&1
echo "seqpar 1B 32K keep-attention rc=$? $((SECONDS - t)) s"; grep -E "error|memory plan|step +[0-9]/" $OUT/bench1b.log | cut -c1-200
cat $OUT/train.jsonl | cut -c1-1200
timeout 100 $B/test_cuda --gtest_filter='CudaModel.ActivationCheckpointingMatchesKeepingActivations:CudaTrain.MemoryLeversTrainAlike' \
  > $OUT/test_cuda.log 2>&1
echo "test_cuda rc=$?"; grep -E "^\[  (PASSED|FAILED) |OK \]|FAILED \]|Failure" $OUT/test_cuda.log | head -12
