#!/usr/bin/env bash
# tools/prebuild_gpu.sh NAME [PATCH...]: builds seqpar and test_cuda for the GPU machine here, on the development
# machine (build/: Release, sm_90a, the CUDA toolkit under /usr/local/cuda), from the working tree with each PATCH
# applied (`git apply`, reverted afterwards), and packs them for a GPU call, so that the call runs them instead of
# building (bench/gpu_calls/build_gpu.sh's `prebuilt`; 1-3 minutes of device time a build):
#   .devtmp/prebuilt/NAME/seqpar.xz, test_cuda.xz  stripped, RUNPATH $ORIGIN/lib then the CUDA library paths
#   .devtmp/prebuilt/NAME/src.sha256               the hash of the sources built (src_hash below): the call uses the
#                                                  binaries only for a tree whose hash is the same
#   .devtmp/prebuilt/lib/                          the libraries of this machine the GPU machine has in another version
#                                                  or not at all (yaml-cpp, SentencePiece, utf8proc, fmt)
# Carry [".devtmp"] (about 4 MB a binary). After a patched build, build/ holds the patched objects until the next
# build here recompiles them. Needs xz and patchelf (apt-get install patchelf).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: tools/prebuild_gpu.sh NAME [PATCH...]" >&2; exit 2; }
name=$1
shift
for tool in xz patchelf strip; do
  command -v $tool > /dev/null || { echo "prebuild_gpu: $tool is missing (apt-get install ${tool/strip/binutils})" >&2; exit 1; }
done
[ -f build/CMakeCache.txt ] || { echo "prebuild_gpu: configure build/ first (README's build command)" >&2; exit 1; }
grep -q "SEQPAR_CUDA:BOOL=ON" build/CMakeCache.txt || { echo "prebuild_gpu: build/ was configured without CUDA" >&2; exit 1; }

applied=()
revert() {
  local i
  for ((i = ${#applied[@]} - 1; i >= 0; i--)); do git apply -R "${applied[$i]}" || echo "prebuild_gpu: could not revert ${applied[$i]}" >&2; done
}
trap revert EXIT
for p in "$@"; do
  git apply "$p" || { echo "prebuild_gpu: $p does not apply to the working tree" >&2; exit 1; }
  applied+=("$p")
done

. bench/gpu_calls/src_hash.sh
hash=$(src_hash .)
cmake --build build --target seqpar test_cuda > /tmp/prebuild_gpu_$name.log 2>&1 ||
  { grep -E "error" /tmp/prebuild_gpu_$name.log | head -20; echo "prebuild_gpu: the build failed (/tmp/prebuild_gpu_$name.log)" >&2; exit 1; }

out=.devtmp/prebuilt/$name
rm -rf "$out" && mkdir -p "$out" .devtmp/prebuilt/lib
for b in seqpar test_cuda; do
  strip --strip-unneeded build/$b -o "$out/$b"
  patchelf --set-rpath '$ORIGIN/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib' "$out/$b"
  xz -T2 -6 -f "$out/$b"
done
echo "$hash" > "$out/src.sha256"
for lib in yaml-cpp sentencepiece utf8proc fmt; do
  ldd build/seqpar | awk -v l="lib$lib.so" 'index($1, l) == 1 {print $3}' | while read -r path; do
    cp -L "$path" .devtmp/prebuilt/lib/
  done
done
echo "prebuilt $name: $(du -sh "$out" | cut -f1), sources $hash, patches: ${*:-none}"
total=$(du -sm .devtmp | cut -f1)
echo ".devtmp is now ${total} MiB (a call carries at most 64 MiB: remove the prebuilds it does not need)"
[ "$total" -lt 64 ] || echo "prebuild_gpu: .devtmp is over the carry limit" >&2
