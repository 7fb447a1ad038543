set -u
B=build-gpu
GPU_CHECK_ONLY=none bash tools/gpu_check.sh /tmp/gc > /dev/null 2>&1; head -3 /tmp/gc/summary.txt > $OUT/misc.txt; grep -E "error|FAILED" /tmp/gc/build.log | head >> $OUT/misc.txt
$B/seqpar bench train --preset llama-3.2-1b --seq-lens 32768 --steps 3 --profile --out $OUT/train.jsonl > /dev/null 2> $OUT/prof32.txt
$B/seqpar bench train --preset llama-3.2-1b --seq-lens 65536 --steps 3 --activation-checkpointing --tiled-loss-tokens 4096 --profile --out $OUT/train.jsonl > /dev/null 2> $OUT/prof64.txt
cat $OUT/misc.txt; head -45 $OUT/prof32.txt; head -45 $OUT/prof64.txt
