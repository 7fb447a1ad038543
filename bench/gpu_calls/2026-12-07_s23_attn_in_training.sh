#!/bin/bash
# Twenty-third session: is attention slower inside a training step than alone? The profiles put cuDNN's
# attention at 29.2 ms a layer (Qwen3-1.7B, 32K, forward + backward) and 144.6 ms (Llama-3.2-1B, 64K) where
# `bench attention` measures about 26.5 and 132.1 ms. The SM clock and power are sampled every 200 ms
# throughout (nvidia-smi), with the phases' times, so a lower clock under sustained load shows.
#   bash bench/gpu_calls/2026-12-07_s23_attn_in_training.sh OUT_DIR
set -u
OUT=$1
. "$(dirname "$0")/build_gpu.sh"
build_gpu $OUT seqpar
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader -lms 200 > $OUT/smi.csv &
SMI=$!
phase() { echo "$(date +%H:%M:%S.%N | cut -c1-12) $1" >> $OUT/phases.txt; }
attn() {  # NAME WARMUP ITERS
  phase "$1 start"
  for pass in fwd fwd_bwd; do
    $B/seqpar bench attention --backend cudnn --seq-lens 32768 --heads 16 --kv-heads 8 --head-dims 128 \
      --passes $pass --warmup $2 --iters $3 2>&1 | grep -o '"ms": *[0-9.]*\|"ms_min": *[0-9.]*' | tr '\n' ' ' |
      sed "s/^/$1 $pass (warmup $2, iters $3): /"; echo
  done
  phase "$1 end"
}
attn cold 2 5
attn long 20 40
phase "train start"
KEEP="--activation-checkpointing --checkpoint-keep-attention --tiled-loss-tokens 8192"
run_bounded q3_32k 60 $B/seqpar bench train --preset qwen3-1.7b --seq-lens 32768 --steps 4 $KEEP --checkpoint-placement auto --profile
phase "train end"
grep -E "^attn_|^profile" $OUT/q3_32k.log
attn hot 2 5
kill $SMI
cat $OUT/phases.txt
# The SM clock and power per phase: mean, min over the samples between each start and end.
python3 - "$OUT" <<'PY'
import sys, csv, datetime
out = sys.argv[1]
ph = [l.split(None, 1) for l in open(f"{out}/phases.txt")]
rows = []
for r in csv.reader(open(f"{out}/smi.csv")):
    try:
        t = datetime.datetime.strptime(r[0].strip(), "%Y/%m/%d %H:%M:%S.%f").time()
        rows.append((t.hour * 3600 + t.minute * 60 + t.second + t.microsecond / 1e6,
                     float(r[1].split()[0]), float(r[2].split()[0]), float(r[3])))
    except Exception:
        pass
def sec(s):
    h, m, x = s.split(":"); return int(h) * 3600 + int(m) * 60 + float(x)
for i in range(0, len(ph) - 1, 2):
    a, b = sec(ph[i][0]), sec(ph[i + 1][0])
    sel = [r for r in rows if a <= r[0] <= b and r[2] > 150]  # samples with the GPU at work
    if sel:
        clk = [r[1] for r in sel]; pw = [r[2] for r in sel]
        print(f"{ph[i][1].split()[0]:6s} {len(sel):4d} busy samples: SM clock mean {sum(clk)/len(clk):.0f} min {min(clk):.0f} MHz, power mean {sum(pw)/len(pw):.0f} max {max(pw):.0f} W, temp max {max(r[3] for r in sel):.0f} C")
PY
echo "done $SECONDS s"
