set -u
B=build-gpu
GPU_CHECK_ONLY=none bash tools/gpu_check.sh /tmp/gc > /dev/null 2>&1; head -3 /tmp/gc/summary.txt > $OUT/misc.txt
python3 - >> $OUT/misc.txt 2>&1 <<'PY'
import inspect, transformers
from transformers.integrations import sdpa_attention as s
print("transformers", transformers.__version__)
print(inspect.getsource(s.use_gqa_in_sdpa))
PY
for kv in 8 32; do for be in cudnn flash; do $B/seqpar bench attention --backend $be --seq-lens 32768,65536 --head-dims 64 --heads 32 --kv-heads $kv --out $OUT/att.jsonl > /dev/null 2>> $OUT/misc.txt; done
python3 bench/peers/torch_sdpa.py --seq-lens 32768,65536 --head-dims 64 --heads 32 --kv-heads $kv --backends cudnn,flash,auto --out $OUT/att.jsonl > /dev/null 2>> $OUT/misc.txt; done
cat $OUT/misc.txt
python3 -c "
import json
for l in open('$OUT/att.jsonl'):
    j=json.loads(l); print(j.get('impl'), j.get('backend',''), j['S'], j['Hkv'], j['pass'], round(j['ms'],2), round(j['tflops']))
"
