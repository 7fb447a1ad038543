#!/bin/bash
# GPU call 2 (fourteenth session): the Llama-3.1-8B shape at 320K tokens on one H200, one full
# step (forward, backward, the offloaded optimizer), with the layer inputs placed per layer as the
# plan chooses for 132 GiB (3% under the card: `seqpar plan ... --checkpoint-placement auto
# --gpu-memory-gib 132` gives rhr5h24g: layer 0 recomputed from the embedding, layer 2 from layer 1,
# six inputs in host memory, 24 on the GPU).
#   bash bench/gpu_calls/2026-12-04_s14_call2.sh OUT_DIR
set -u
OUT=$1
. "$(dirname "$0")/build_gpu.sh"
build_gpu $OUT seqpar
free -g | head -2
L="--activation-checkpointing --tiled-mlp-tokens 8192 --tiled-loss-tokens 8192 --offload-optimizer cpu --host-memory-gib 120"
$B/seqpar plan --preset llama-3.1-8b --seq-len 327680 $L --checkpoint-placement rhr5h24g > $OUT/plan8b.txt 2>&1
grep -E "peak|<-" $OUT/plan8b.txt
t=$SECONDS
( while sleep 20; do echo "$((SECONDS - t)) s: host used $(free -m | awk '/Mem:/{print $3}') MiB"; done ) > $OUT/host.log 2>&1 &
W=$!
timeout 500 $B/seqpar bench train --preset llama-3.1-8b --seq-lens 327680 $L --checkpoint-placement rhr5h24g \
  --steps 1 --log-level debug --out $OUT/train.jsonl > $OUT/bench8b.log 2>&1
echo "seqpar 8B 320K rc=$? $((SECONDS - t)) s"; kill $W
grep -E "error|step +[0-9]/|in use|ready|initial|placement" $OUT/bench8b.log | cut -c1-240 | tail -10
tail -4 $OUT/host.log
cat $OUT/train.jsonl | cut -c1-1400
