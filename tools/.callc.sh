set -u
B=build-gpu
GPU_CHECK_ONLY=none bash tools/gpu_check.sh /tmp/gc > /dev/null 2>&1; cat /tmp/gc/summary.txt | head -3 > $OUT/misc.txt
$B/test_cuda --gtest_filter='CudaOps.Matmul*' > /tmp/t.log 2>&1; grep -E "OK|FAILED|PASSED|budget" /tmp/t.log >> $OUT/misc.txt
$B/seqpar bench gemm --shapes llama-1b.k.wgrad,llama-3b.k.wgrad,llama-1b.q.wgrad,llama-1b.o.fwd,square.8192 --sweep --tune-repeats 6 --rounds 5 --iters 20 --log-level debug --out $OUT/diag.jsonl > /dev/null 2> $OUT/diag.txt
for v in --strict --strict ""; do echo "== pass $v" >> $OUT/inter.txt; SEQPAR_LOG_LEVEL=debug timeout 170 python3 bench/peers/gemm_interleaved.py --seqpar $B/seqpar --rounds 5 --iters 20 $v >> $OUT/inter.jsonl 2>> $OUT/inter.txt; done
python3 - >> $OUT/misc.txt 2>&1 <<'PY'
import torch, transformers
from transformers.integrations import sdpa_attention as s
k = torch.empty(1, 8, 16, 64, device="cuda", dtype=torch.bfloat16)
try:
    print("transformers", transformers.__version__, "use_gqa_in_sdpa(None, k):", s.use_gqa_in_sdpa(None, k))
except Exception as e:
    print("use_gqa_in_sdpa:", repr(e))
PY
for be in cudnn flash; do $B/seqpar bench attention --backend $be --seq-lens 32768,65536 --head-dims 64 --heads 32 --kv-heads 8 --out $OUT/att.jsonl > /dev/null 2>> $OUT/misc.txt; done
python3 bench/peers/torch_sdpa.py --seq-lens 32768,65536 --head-dims 64 --heads 32 --kv-heads 8 --backends cudnn,flash,auto --out $OUT/att.jsonl > /dev/null 2>> $OUT/misc.txt
python3 bench/peers/torch_sdpa.py --seq-lens 32768,65536 --head-dims 64 --heads 32 --kv-heads 32 --backends cudnn,auto --out $OUT/att.jsonl > /dev/null 2>> $OUT/misc.txt
$B/seqpar bench attention --backend cudnn --seq-lens 32768,65536 --head-dims 64 --heads 32 --kv-heads 32 --out $OUT/att.jsonl > /dev/null 2>> $OUT/misc.txt
cat $OUT/misc.txt; grep -E "geometric" $OUT/inter.txt; grep -v debug $OUT/diag.txt | grep -A4 "distinct"
python3 -c "
import json
for l in open('$OUT/att.jsonl'):
    j=json.loads(l); print(j.get('impl'), j.get('backend'), j.get('seq_len', j.get('S')), j.get('kv_heads', j.get('Hkv')), j.get('pass'), round(j.get('ms',0),2), round(j.get('tflops',0)))
"
