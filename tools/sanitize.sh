#!/usr/bin/env bash
# The CPU suite under sanitizers, in build dirs of their own (docs/fuzzing.md records the runs):
#
#   tools/sanitize.sh asan [ctest -R regex]   ASan + UBSan (gcc), build-asan/, then ctest
#   tools/sanitize.sh tsan                    TSan (gcc), build-tsan/, the comm / parallel / train
#                                             binaries (the in-process transport: ranks as threads)
#
# CUDA is off in both (-DSEQPAR_CUDA=OFF): the sanitizers see host code only. Slow (a 2-core
# machine takes hours for the whole ASan suite): not part of tools/test.sh, whose CI budget does
# not allow it. JOBS=2 sets the build parallelism; extra arguments go to ctest, e.g.
#   TARGETS="test_io test_data" tools/sanitize.sh asan -L 'io|data'
set -euo pipefail
mode=${1:-asan}
shift || true
root=$(cd "$(dirname "$0")/.." && pwd)
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)

case "$mode" in
  asan)
    build=$root/build-asan
    flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
    ;;
  tsan)
    build=$root/build-tsan
    flags="-fsanitize=thread -fno-omit-frame-pointer"
    ;;
  *)
    echo "usage: tools/sanitize.sh asan|tsan [ctest args]" >&2
    exit 2
    ;;
esac

cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${launcher[@]}" -DSEQPAR_CUDA=OFF \
  -DSEQPAR_DIAG=OFF -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="$flags" >/dev/null

# halt_on_error: the first report fails the test; detect_leaks: LeakSanitizer at exit.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:halt_on_error=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}
export OPENBLAS_NUM_THREADS=1  # OpenBLAS's own (uninstrumented) thread pool is not ours to check

if [ "$mode" = tsan ]; then
  cmake --build "$build" -j "${JOBS:-2}" --target test_comm test_parallel test_train
  ctest --test-dir "$build" -L 'comm|parallel|train' --timeout 3600 -j "${JOBS:-2}" --output-on-failure "$@"
else
  # TARGETS="test_io test_data" builds only those (then pass -L 'io|data' to ctest).
  cmake --build "$build" -j "${JOBS:-2}" ${TARGETS:+--target $TARGETS}
  ctest --test-dir "$build" --timeout 3600 -j "${JOBS:-2}" --output-on-failure "$@"
fi
