#!/bin/bash
# Sourced by the GPU call scripts: build_gpu OUT TARGET... configures build-gpu/ (CUDA on, Release,
# the carried utf8proc of .devtmp/utf8proc) and builds the targets with 16 jobs, logging to
# OUT/build.log; says "build ok" with the seconds, or prints the errors and exits the script.
B=build-gpu
. "$(dirname "${BASH_SOURCE[0]}")/src_hash.sh"
# pack_logs DIR DEST: every file under DIR in one archive, DEST/logs.tar.gz (a call brings back only a few files from
# its output folder: the thirty-sixth session lost its test logs to that). Scripts that write many logs keep them in a
# folder of their own and end with `trap "pack_logs DIR $1" EXIT`.
pack_logs() {
  tar czf "$2/logs.tar.gz" -C "$1" . 2> /dev/null && echo "logs: $2/logs.tar.gz ($(du -h "$2/logs.tar.gz" | cut -f1))"
}
# prebuilt NAME DIR SRC TARGET...: DIR/seqpar and DIR/test_cuda (and DIR/lib) from .devtmp/prebuilt/NAME
# (tools/prebuild_gpu.sh, built on the development machine) when the TARGETs are among them, NAME was built from the
# sources of the tree SRC (src_hash) and its seqpar runs here; says "NAME prebuilt ok", else returns 1 with the reason
# (the caller then builds as usual).
prebuilt() {
  local pb=$PWD/.devtmp/prebuilt name=$1 dir=$2 src=$3 t b
  shift 3
  [ -f "$pb/$name/src.sha256" ] || return 1
  for t in "$@"; do [[ $t == seqpar || $t == test_cuda ]] || { echo "$name: $t is not prebuilt, building"; return 1; }; done
  [ "$(src_hash "$src")" = "$(cat "$pb/$name/src.sha256")" ] || { echo "$name: prebuilt from other sources, building"; return 1; }
  mkdir -p "$dir/lib" && cp "$pb"/lib/* "$dir/lib/" 2> /dev/null
  for b in seqpar test_cuda; do
    [ -f "$pb/$name/$b.xz" ] && xz -dc "$pb/$name/$b.xz" > "$dir/$b" && chmod +x "$dir/$b"
  done
  "$dir/seqpar" --help > /dev/null 2>&1 ||
    { echo "$name: prebuilt seqpar does not run here ($(ldd "$dir/seqpar" | grep 'not found' | tr -s ' \n' ' ')), building"
      rm -f "$dir/seqpar" "$dir/test_cuda"; return 1; }
  echo "$name prebuilt ok $SECONDS s"
}
build_gpu() {
  local out=$1 name=gpu n h
  shift
  # Any prebuild of this tree's sources will do (e.g. a patch's, once the patch has landed).
  h=$(src_hash .)
  for n in $(ls .devtmp/prebuilt 2> /dev/null); do
    [ "$(cat .devtmp/prebuilt/$n/src.sha256 2> /dev/null)" = "$h" ] && { name=$n; break; }
  done
  prebuilt $name $B . "$@" && return 0
  local u=$PWD/.devtmp/utf8proc
  { cmake -S . -B $B -G Ninja -DSEQPAR_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DUTF8PROC_INCLUDE_DIR=$u \
      -DUTF8PROC_LIBRARY=$u/libutf8proc.a && cmake --build $B -j 16 --target "$@"; } > $out/build.log 2>&1 \
    && echo "build ok $SECONDS s" || { echo "BUILD FAILED"; grep -E "error" $out/build.log | head -30; exit 1; }
}
# patched_copy DIR PATCH...: DIR becomes a copy of the working tree (no build folders, .devtmp or .git) with each
# PATCH (a file, `patch -p1`) applied in order, for build_other; the script ends when the copy or a patch fails.
patched_copy() {
  local dir=$1 p
  shift
  rm -rf "$dir" && mkdir -p "$dir" && tar --exclude='./build*' --exclude=./.devtmp --exclude=./.git -cf - . | tar -xf - -C "$dir" ||
    { echo "copy to $dir failed"; exit 1; }
  for p in "$@"; do
    patch -d "$dir" -p1 < "$p" > /dev/null || { echo "patch $p on $dir failed"; exit 1; }
  done
}
# build_other NAME SRC CUDA_FLAGS TARGET...: a second build beside $B, of the source tree SRC (`.` or a `git
# archive` of an earlier commit under .devtmp) with extra CUDA_FLAGS (compile definitions of a measurement
# build, or ""), into build-NAME (no tests unless a TARGET asks for them, no seqpar-diag), logging to
# OUT/build_NAME.log; says "NAME build ok" with the seconds, or prints the errors (the script goes on).
build_other() {
  local name=$1 src=$2 flags=$3
  shift 3
  [ -z "$flags" ] && prebuilt $name build-$name $src "$@" && return 0
  local u=$PWD/.devtmp/utf8proc tests=OFF
  [[ " $* " == *" test_cuda "* ]] && tests=ON
  { cmake -S $src -B build-$name -G Ninja -DSEQPAR_CUDA=ON -DSEQPAR_TESTS=$tests -DSEQPAR_DIAG=OFF \
      -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CUDA_FLAGS=$flags" -DUTF8PROC_INCLUDE_DIR=$u \
      -DUTF8PROC_LIBRARY=$u/libutf8proc.a && cmake --build build-$name -j 16 --target "$@"; } > $OUT/build_$name.log 2>&1 \
    && echo "$name build ok $SECONDS s" || { echo "$name BUILD FAILED"; grep -E "error" $OUT/build_$name.log | head; }
}
# build_variants OUT [NAME=PATCH[+PATCH...]]...: the default build ($B: seqpar) and, for each NAME, build-NAME (seqpar,
# test_cuda) of a copy of the tree in /tmp/NAME with its PATCHes applied in order (patched_copy), all at once (prebuilt
# where tools/prebuild_gpu.sh made them); then prints the GPU's name and driver.
build_variants() {
  local out=$1 v ps
  shift
  for v in "$@"; do ps=${v#*=}; patched_copy /tmp/${v%%=*} ${ps//+/ }; done
  build_gpu $out seqpar &
  for v in "$@"; do build_other ${v%%=*} /tmp/${v%%=*} "" seqpar test_cuda & done
  wait
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
}
# peer_env OUT: installs the carried peer wheels (.devtmp/whl: DeepSpeed, liger-kernel, hjson, pydantic)
# into /tmp/site and puts them on the path of the python3 the peers run under.
peer_env() {
  pip install --no-index --no-deps --target /tmp/site .devtmp/whl/*.whl > $1/pip.log 2>&1 || tail -3 $1/pip.log
  export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH TORCH_CUDA_ARCH_LIST=9.0
}
# train_fields FILE: the figures of bench train's and the peers' JSON lines (the peers' JSON puts a space
# after each colon), on one line.
train_fields() {
  grep -o '"impl": *"[a-z]*"\|"seq_len": *[0-9]*\|"step_ms": *[0-9.]*\|"tokens_per_s_per_gpu": *[0-9.]*\|"peak_mem_gib": *[0-9.]*\|"plan_peak_gib": *[0-9.]*\|"host_peak_gib": *[0-9.]*\|"loss": *[0-9.]*\|"checkpoint_placement": *"[^"]*"\|"error": *"[^"]*"' "$1" | tr '\n' ' '
}
# run_bounded NAME LIMIT COMMAND...: COMMAND --out OUT/NAME.jsonl under `timeout LIMIT` (its log in
# OUT/NAME.log), skipped when it could end past END seconds into the call (default 590); prints the
# exit status, the seconds and the figures. OUT: the call's output folder.
run_bounded() {
  local name=$1 lim=$2 t=$SECONDS
  shift 2
  [ $((SECONDS + lim)) -gt "${END:-590}" ] && { echo "$name: skipped (time)"; return; }
  timeout "$lim" "$@" --out "$OUT/$name.jsonl" > "$OUT/$name.log" 2>&1
  echo "$name rc=$? $((SECONDS - t)) s: $(train_fields "$OUT/$name.jsonl")"
}
# run_tests LIMIT FILTER: $B/test_cuda's tests matching FILTER under `timeout LIMIT` (log in OUT/tests.log);
# prints the exit status, the seconds, gtest's summary and the first failures.
run_tests() {
  local t=$SECONDS
  SEQPAR_TEST_SOURCE_DIR=$PWD SEQPAR_TEST_BINARY=$PWD/$B/seqpar timeout "$1" $B/test_cuda --gtest_filter="$2" \
    > "$OUT/tests.log" 2>&1
  echo "tests rc=$? $((SECONDS - t)) s: $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/tests.log" | tr '\n' ' ')"
  grep -E "FAILED|Failure" "$OUT/tests.log" | head -10
}
# test_build NAME: build-NAME/test_cuda's attention tests (every CUDA attention path and the op harness's attention
# case; ~110 s alone on the machine, more while other builds take the cores) under `timeout 200`, log in
# OUT/tests_NAME.log; prints the exit status, the seconds, gtest's summary and the first failures; succeeds only if
# gtest says PASSED (the scripts time a measurement build only then).
test_build() {
  local t=$SECONDS
  SEQPAR_TEST_SOURCE_DIR=$PWD SEQPAR_TEST_BINARY=$PWD/build-$1/seqpar timeout 200 build-$1/test_cuda \
    --gtest_filter='CudaAttention*:CudnnAttention*:CudaSpAttention*:CudaOpHarness.EveryAttentionCaseOnEveryCudaPath' \
    > "$OUT/tests_$1.log" 2>&1
  echo "tests $1 rc=$? $((SECONDS - t)) s: $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/tests_$1.log" | tr '\n' ' ')"
  grep -E "FAILED|Failure" "$OUT/tests_$1.log" | head -6
  grep -q '^\[  PASSED' "$OUT/tests_$1.log" || { grep -E '^\[ RUN' "$OUT/tests_$1.log" | tail -2; return 1; }
}
# test_builds NAME...: test_build of every NAME at once (one GPU; the suites' logs in OUT/t_NAME.txt, printed in the
# order named); PASSED becomes the build-NAME folders whose tests passed, in that order.
test_builds() {
  local n
  for n in "$@"; do test_build $n > $OUT/t_$n.txt 2>&1 & done
  wait
  PASSED=""
  for n in "$@"; do
    cat $OUT/t_$n.txt
    grep -q '^\[  PASSED' "$OUT/tests_$n.log" 2> /dev/null && PASSED="$PASSED build-$n"
  done
}
# smoke_builds H NAME...: each build-NAME/seqpar's flash forward+backward once at 16K, H query heads over 8 KV heads,
# head dims 128 and 64, each under `timeout 30` (a hang shows here, not in the timings, which have no limit; logs in
# OUT/smoke_NAME_D.log); OK becomes the build-NAME folders that ran both, in the order named.
smoke_builds() {
  local h=$1 v D bad
  shift
  OK=""
  for v in "$@"; do
    bad=0
    for D in 128 64; do
      timeout 30 build-$v/seqpar bench attention --backend flash --seq-lens 16384 --passes fwd_bwd --heads $h \
        --kv-heads 8 --head-dims $D --warmup 0 --iters 1 > $OUT/smoke_${v}_$D.log 2>&1 || { echo "$v D=$D smoke rc=$?"; bad=1; }
    done
    [ $bad = 0 ] && OK="$OK build-$v"
  done
  echo "smoke ok:$OK ($SECONDS s)"
}
# attn_ms LABEL BIN BACKEND D H PASS [HKV]: `BIN/seqpar bench attention` at 16K and 64K, H query heads over HKV KV
# heads (default 8), head dim D, PASS (fwd / fwd_bwd), 2 warm-up and 5 timed runs: one line
# "D=.. H=.. [Hkv=.. ]PASS LABEL: S .. ms .. S .. ms .." (Hkv named when given).
attn_ms() {
  $2/seqpar bench attention --backend $3 --seq-lens 16384,65536 --passes $6 --heads $5 --kv-heads ${7:-8} \
    --head-dims $4 --warmup 2 --iters 5 2>&1 | grep -o '"S": *[0-9]*\|"ms": *[0-9.]*' | tr '\n' ' ' |
    sed "s|^|D=$4 H=$5 ${7:+Hkv=$7 }$6 $1: |"; echo
}
# attn_rounds PASS D BUILD_DIR...: attn_ms of seqpar's cuDNN path, then the flash kernel of the default build ($B)
# and each BUILD_DIR alternating, two rounds at H 32 and one at H 16 (Hkv 8), head dim D.
attn_rounds() {
  local pass=$1 D=$2 bin
  shift 2
  attn_ms cudnn $B cudnn $D 32 $pass
  for bin in $B "$@" $B "$@"; do attn_ms $bin $bin flash $D 32 $pass; done
  attn_ms cudnn $B cudnn $D 16 $pass
  for bin in $B "$@"; do attn_ms $bin $bin flash $D 16 $pass; done
}
# bwd_stalls LIMIT BUILD_DIR...: ncu (clocks left alone) of each build's sm_90 backward at 16K, H 32 / Hkv 8, D = 128,
# one launch under `timeout LIMIT`: its duration, tensor-pipe activity and the MIO-throttle, short-scoreboard and
# barrier stalls per issued instruction (log OUT/ncu_BUILD.log).
bwd_stalls() {
  local lim=$1 bin
  shift
  local m="smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio"
  m+=",smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio"
  m+=",smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio"
  m+=",sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,gpu__time_duration.sum"
  for bin in "$@"; do
    timeout $lim ncu --clock-control none --metrics "$m" -k regex:bwd_sm90 -c 1 $bin/seqpar bench attention --backend \
      flash --seq-lens 16384 --heads 32 --kv-heads 8 --passes fwd_bwd --head-dims 128 --warmup 0 --iters 1 \
      > $OUT/ncu_$(basename $bin).log 2>&1
    echo "#### $bin rc=$?"; grep -E "stalled|tensor|duration" $OUT/ncu_$(basename $bin).log
  done
}
