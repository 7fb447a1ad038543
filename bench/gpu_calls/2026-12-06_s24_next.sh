#!/bin/bash
# For the next GPU calls (written in the twenty-fourth session, not run).
#   PART=grid (default, run it first: it verifies bf77bf4 + 000e91d, on main and not yet run on a GPU): the
#     forward kernels' block order (a 1-D grid, heads in sections of KV groups whose K and V fit half the L2,
#     tile-major within a section) under the attention tests, then `bench attention` of the commit before
#     (.devtmp/base_grid, a `git archive` of 516b2ab's CMakeLists.txt and src) and of it, alternating, D = 64
#     and 128 (sm_90 kernels) and 96 (mma.sync), forward and forward+backward, 16K and 64K. About 330 s. If the
#     tests fail, revert 000e91d and bf77bf4; if it is slower, too.
#   PART=3b: issue 15's Llama-3.2-3B at 64K keeping attention with the optimizer offloaded, `auto` placement, five
#     steps, so that bench's figure (now the steps between the first and the last) is the steady step, beside the
#     ALST recipe; and the 1B at 64K in today's mode beside it. About 420 s.
#   PART=lazy: the sm_90 forward's conditional rescaling (SEQPAR_SM90_FWD_LAZY_RESCALE=1, a measurement build;
#     default builds unchanged): the attention tests under it, then the forward of the default build, of it and of
#     cuDNN, D = 64 and 128, 16K and 64K. About 300 s. If it passes and wins, make it the kernel's only path.
#   PART=ncu: where the sm_90 kernels wait now that the D = 64 backward's dQ goes through the writer
#     (2026-12-07_s23_ncu_source.sh).
#   bash bench/gpu_calls/2026-12-06_s24_next.sh OUT_DIR
set -u
OUT=$1
if [ "${PART:-grid}" = ncu ]; then exec bash "$(dirname "$0")/2026-12-07_s23_ncu_source.sh" "$OUT"; fi
. "$(dirname "$0")/build_gpu.sh"
if [ "${PART:-grid}" = lazy ]; then
  build_gpu $OUT seqpar
  build_other lazy . "-DSEQPAR_SM90_FWD_LAZY_RESCALE=1" seqpar test_cuda
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  timeout 150 build-lazy/test_cuda --gtest_filter='CudaAttention*:CudnnAttention*:CudaSpAttention*' > $OUT/tests_lazy.log 2>&1
  echo "tests lazy rc=$?: $(grep -E '^\[  (PASSED|FAILED) ' $OUT/tests_lazy.log | tr '\n' ' ')"
  grep -E "FAILED|Failure" $OUT/tests_lazy.log | head -5
  for d in 64 128; do
    for bin in cudnn $B build-lazy $B build-lazy; do
      case $bin in cudnn) cmd="$B/seqpar bench attention --backend cudnn" ;; *) cmd="$bin/seqpar bench attention --backend flash" ;; esac
      $cmd --seq-lens 16384,65536 --passes fwd --heads 32 --kv-heads 8 --head-dims $d --warmup 2 --iters 5 2>&1 |
        grep -o '"S": *[0-9]*\|"ms": *[0-9.]*\|"tflops": *[0-9.]*' | tr '\n' ' ' | sed "s|^|D=$d fwd $bin: |"; echo
    done
  done
  echo "done $SECONDS s"
  exit 0
fi
if [ "${PART:-grid}" = grid ]; then
  build_gpu $OUT seqpar test_cuda
  build_other base .devtmp/base_grid "" seqpar
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  run_tests 200 'CudaAttention*:CudnnAttention*:CudaSpAttention*:CudaOpHarness.*'
  for shape in 64:fwd 64:fwd_bwd 128:fwd 128:fwd_bwd 96:fwd_bwd; do
    IFS=: read d pass <<< "$shape"
    h=32; [ $d = 96 ] && h=16
    for bin in build-base $B build-base $B; do
      $bin/seqpar bench attention --backend flash --seq-lens 16384,65536 --passes $pass --heads $h --kv-heads 8 \
        --head-dims $d --warmup 2 --iters 5 2>&1 |
        grep -o '"S": *[0-9]*\|"ms": *[0-9.]*\|"tflops": *[0-9.]*' | tr '\n' ' ' | sed "s|^|D=$d $pass $bin: |"; echo
    done
  done
  echo "done $SECONDS s"
  exit 0
fi
build_gpu $OUT seqpar
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
peer_env $OUT
KEEP="--activation-checkpointing --checkpoint-keep-attention --tiled-loss-tokens 8192"
run_bounded b3_64_auto_off 90 $B/seqpar bench train --preset llama-3.2-3b --seq-lens 65536 --steps 5 $KEEP \
  --offload-optimizer cpu --checkpoint-placement auto
run_bounded b3_64_alst 130 python3 bench/peers/alst_train_step.py --preset llama-3.2-3b --seq-lens 65536 --steps 3 --torch-adam
run_bounded l1b_64_keep 60 $B/seqpar bench train --preset llama-3.2-1b --seq-lens 65536 --steps 4 $KEEP
run_bounded l1b_64_alst 100 python3 bench/peers/alst_train_step.py --preset llama-3.2-1b --seq-lens 65536 --steps 3 --torch-adam
grep "step .*/5" $OUT/b3_64_auto_off.log
echo "done $SECONDS s"
