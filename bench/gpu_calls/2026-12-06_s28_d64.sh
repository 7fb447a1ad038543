#!/bin/bash
# Twenty-eighth session, call 4: the default now (O's rescale before the turn where warpgroups take turns; the
# backward's dS descriptor once per step) against `base` (.devtmp/base_s28: a git archive of acd5646, call 3's new
# build), and two D = 64 forward measurement builds: lazy64 (-DSEQPAR_SM90_FWD_D64_LAZY=1: conditional rescaling at
# D = 64 too) and nwg2 (-DSEQPAR_SM90_FWD_D64_NWG=2: two warpgroups taking turns, BM 128, 240 registers).
# Tests of the default build (attention, op harness) run while the others build.
#   bash bench/gpu_calls/2026-12-06_s28_d64.sh OUT_DIR   (~450 s)
set -u
OUT=$1
. "$(dirname "$0")/build_gpu.sh"
build_gpu $OUT seqpar test_cuda
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
( t=$SECONDS; timeout 240 $B/test_cuda --gtest_filter='CudaAttention*:CudnnAttention*:CudaSpAttention*:CudaOpHarness.*' \
    > $OUT/tests.log 2>&1; echo "tests rc=$? $((SECONDS - t)) s" > $OUT/tests_rc.txt ) &
TP=$!
build_other base .devtmp/base_s28 "" seqpar &
build_other lazy64 . "-DSEQPAR_SM90_FWD_D64_LAZY=1" seqpar &
build_other nwg2 . "-DSEQPAR_SM90_FWD_D64_NWG=2" seqpar &
wait
cat $OUT/tests_rc.txt; grep -E '^\[  (PASSED|FAILED) ' $OUT/tests.log; grep -E "FAILED|Failure" $OUT/tests.log | head -8
grep -q '^\[  PASSED' $OUT/tests.log || { grep -E '^\[ RUN' $OUT/tests.log | tail -2; exit 1; }
attn_ms cudnn $B cudnn 64 32 fwd
for bin in build-base $B build-lazy64 build-nwg2 build-base $B build-lazy64 build-nwg2; do
  [ -x $bin/seqpar ] && attn_ms $bin $bin flash 64 32 fwd
done
attn_ms cudnn $B cudnn 64 16 fwd
for bin in build-base $B build-lazy64 build-nwg2; do [ -x $bin/seqpar ] && attn_ms $bin $bin flash 64 16 fwd; done
attn_ms cudnn $B cudnn 128 32 fwd
for bin in build-base $B build-base $B; do attn_ms $bin $bin flash 128 32 fwd; done
attn_ms cudnn $B cudnn 128 32 fwd_bwd
for bin in build-base $B build-base $B; do attn_ms $bin $bin flash 128 32 fwd_bwd; done
echo "done $SECONDS s"
