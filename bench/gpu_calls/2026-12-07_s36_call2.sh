#!/bin/bash
# Thirty-sixth session, call 2 (the tree with `ho` landed): Llama-3.2-1B at 64K and 128K beside the ALST recipe, a
# profiled 64K step (printed), and the first failures of `rs` (D = 64 forward row sums on the tensor cores) in the
# test that failed in call 1. Few files come back from a call, so the logs stay on the machine and the figures are
# printed; the profile and rs's test log are copied to the output folder.
#   bash bench/gpu_calls/2026-12-07_s36_call2.sh OUT_DIR   (carry [".devtmp"]; ~300 s)
set -u
REAL_OUT=$1
OUT=/tmp/s36c2
mkdir -p $OUT
. "$(dirname "$0")/build_gpu.sh"
trap "pack_logs $OUT $REAL_OUT" EXIT
build_variants $OUT rs=bench/gpu_calls/2026-12-07_s36_tc_rowsum.patch
SEQPAR_TEST_SOURCE_DIR=$PWD SEQPAR_TEST_BINARY=$PWD/build-rs/seqpar timeout 60 build-rs/test_cuda \
  --gtest_filter='CudaAttention.SplitKeysMergeEqualsFullF16' > $REAL_OUT/rs_test.log 2>&1
echo "rs test rc=$?"; grep -B2 -A8 "Failure" $REAL_OUT/rs_test.log | head -40
KEEP="--activation-checkpointing --checkpoint-keep-attention --tiled-loss-tokens 8192 --checkpoint-placement auto"
peer_env $OUT
END=${END:-420}
run_bounded l1_prof 45 $B/seqpar bench train --preset llama-3.2-1b --seq-lens 65536 --steps 3 $KEEP --profile
grep -A45 "^profile" $OUT/l1_prof.log > $REAL_OUT/l1_prof.txt; head -30 $REAL_OUT/l1_prof.txt
run_bounded l1_gpu 40 $B/seqpar bench train --preset llama-3.2-1b --seq-lens 65536 --steps 3 $KEEP
run_bounded l1_alst 90 python3 bench/peers/alst_train_step.py --preset llama-3.2-1b --seq-lens 65536 --steps 3 --torch-adam
run_bounded l1_gpu_b 40 $B/seqpar bench train --preset llama-3.2-1b --seq-lens 65536 --steps 3 $KEEP
run_bounded l1_128 70 $B/seqpar bench train --preset llama-3.2-1b --seq-lens 131072 --steps 3 $KEEP
run_bounded l1_128_alst 120 python3 bench/peers/alst_train_step.py --preset llama-3.2-1b --seq-lens 131072 --steps 3 --torch-adam
echo "done $SECONDS s"
