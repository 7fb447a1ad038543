#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz/) with clang, ASan and UBSan in build-fuzz/ and runs
# each for SECONDS (default 60), one after another, from its committed seed corpus
# (tests/fuzz/corpus/<target>/) into build-fuzz/corpus/<target>/ (the grown corpus, kept between
# runs). A crash, leak, timeout or out-of-memory leaves its input in build-fuzz/artifacts/ and
# makes the script fail. docs/fuzzing.md records the runs.
#
#   tools/fuzz.sh [SECONDS] [TARGET...]      e.g. tools/fuzz.sh 600 fuzz_safetensors
#   JOBS=2 (build parallelism), CXX=clang++-14, FUZZ_FLAGS="extra libFuzzer flags"
set -euo pipefail
secs=${1:-60}
shift || true
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build-fuzz
cxx=${CXX:-clang++-14}
all=(fuzz_safetensors fuzz_hf_config fuzz_ds_config fuzz_accelerate_config fuzz_tokenizer_json
     fuzz_tokenizer_encode fuzz_token_file fuzz_checkpoint)
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=("${all[@]}")

launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER="$cxx" \
  "${launcher[@]}" -DSEQPAR_CUDA=OFF -DSEQPAR_TESTS=OFF -DSEQPAR_DIAG=OFF -DSEQPAR_FUZZ=ON >/dev/null
cmake --build "$build" -j "${JOBS:-2}" --target "${targets[@]}"

mkdir -p "$build/artifacts" "$build/logs"
status=0
for t in "${targets[@]}"; do
  mkdir -p "$build/corpus/$t"
  seeds=()
  [ -d "$root/tests/fuzz/corpus/$t" ] && seeds=("$root/tests/fuzz/corpus/$t")
  dict=()
  [ -f "$root/tests/fuzz/$t.dict" ] && dict=(-dict="$root/tests/fuzz/$t.dict")
  echo "== $t: ${secs}s"
  # -rss_limit_mb / -malloc_limit_mb: an input that makes seqpar allocate gigabytes is a finding.
  # detect_stack_use_after_return stays off (slow); leaks are reported at exit.
  if ! "$build/fuzz/$t" "$build/corpus/$t" "${seeds[@]}" "${dict[@]}" -max_total_time="$secs" -timeout=10 \
      -rss_limit_mb=2048 -malloc_limit_mb=1024 -print_final_stats=1 -artifact_prefix="$build/artifacts/$t-" \
      ${FUZZ_FLAGS:-} >"$build/logs/$t.log" 2>&1; then
    echo "   FAILED: see $build/logs/$t.log and $build/artifacts/"
    status=1
  fi
  grep -E "^stat::number_of_executed_units|^stat::peak_rss_mb|^#[0-9]+.*DONE" "$build/logs/$t.log" | sed 's/^/   /' || true
done
exit $status
