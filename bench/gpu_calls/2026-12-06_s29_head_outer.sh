#!/bin/bash
# Twenty-ninth session. The default build now has the sm_90 backward's grid (key tile, KV head) (the twenty-eighth
# session's KT_MAJOR build, measured 10% faster at 16K, H 32, D 128 in this session's calls 1 and 4) and no other
# measurement switch; it is tested here for the first time. Beside it, build `ho` = -DSEQPAR_SM90_BWD_HEAD_OUTER=1:
# a block walks every visible query tile for its group's first head, then the next head (the running blocks then
# read one head's Q / dO / dQ rows, ~17 MB at D = 128, instead of four heads', ~69 MB).
# 1. tests of both builds; 2. forward+backward, D = 128 and 64, H 32 and 16 (Hkv 8), 16K / 64K, beside cuDNN, two
# alternating rounds; 3. ncu: duration, DRAM throughput and L2 hit rate of the D = 128 backward of both builds and
# cuDNN's (16K, H 32).
#   bash bench/gpu_calls/2026-12-06_s29_head_outer.sh OUT_DIR   (~400 s; ran at e14e165: the switch was removed from
#   main after it, so rerun it from a `git archive e14e165`)
set -u
OUT=$1
. "$(dirname "$0")/build_gpu.sh"
build_gpu $OUT seqpar test_cuda
build_other ho . "-DSEQPAR_SM90_BWD_HEAD_OUTER=1" seqpar test_cuda
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
test_build gpu
H=""
test_build ho && H=build-ho
for D in 128 64; do
  for NH in 32 16; do
    attn_ms cudnn $B cudnn $D $NH fwd_bwd
    for bin in $B $H $B $H; do attn_ms $bin $bin flash $D $NH fwd_bwd; done
  done
done
echo "bench done $SECONDS s"
A="--seq-lens 16384 --heads 32 --kv-heads 8 --passes fwd_bwd --head-dims 128 --warmup 0 --iters 1"
M=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sector_hit_rate.pct
for k in "flash $B regex:bwd_sm90" "flash $H regex:bwd_sm90" "cudnn $B regex:bprop"; do
  set -- $k
  [ -z "$2" ] || [ "$2" = regex:bwd_sm90 ] && continue
  timeout 90 ncu --clock-control none --metrics $M -k "$3" -c 1 $2/seqpar bench attention --backend $1 $A \
    > $OUT/ncu_$1_${2//\//_}.log 2>&1
  echo "#### $1 $2 rc=$?"
  grep -E "gpu__time|dram__|lts__" $OUT/ncu_$1_${2//\//_}.log | head -3
done
echo "done $SECONDS s"
