set -u
B=build-gpu
GPU_CHECK_ONLY=none bash tools/gpu_check.sh /tmp/gc > /dev/null 2>&1; head -3 /tmp/gc/summary.txt > $OUT/misc.txt; grep -E "error|FAILED" /tmp/gc/build.log | head >> $OUT/misc.txt
timeout 100 $B/test_cuda --gtest_filter='CudaTrain.*:CudaModel.*' > /tmp/t.log 2>&1; grep -E "^\[  FAILED|^\[       OK|PASSED|Failure|Which is|Expected" /tmp/t.log | head -30 >> $OUT/misc.txt
P="--preset llama-3.2-1b --steps 3 --out $OUT/train.jsonl"
CK="--activation-checkpointing --tiled-loss-tokens 4096"
run() { echo "== $*" >> $OUT/misc.txt; timeout 150 "$@" > /dev/null 2>> $OUT/log.txt; echo "rc=$?" >> $OUT/misc.txt; }
run $B/seqpar bench train $P --seq-lens 65536 $CK --profile
run python3 bench/peers/hf_train_step.py $P --seq-lens 32768,65536 --gradient-checkpointing
run $B/seqpar bench train $P --seq-lens 32768 $CK
run $B/seqpar bench train $P --seq-lens 65536 $CK --checkpoint-keep-attention
run $B/seqpar bench train $P --seq-lens 8192,32768
run python3 bench/peers/hf_train_step.py $P --seq-lens 8192
cat $OUT/misc.txt
python3 -c "
import json
for l in open('$OUT/train.jsonl'):
    j=json.loads(l); print(j.get('impl'), j.get('seq_len'), j.get('activation_checkpointing', j.get('gradient_checkpointing')), j.get('checkpoint_keep_attention'), j.get('step_ms'), j.get('peak_mem_gib'), j.get('error','')[:80])
"
grep -A12 "^profile" $OUT/log.txt | head -14
