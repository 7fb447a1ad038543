#!/bin/bash
# Sourced by the GPU call scripts: build_gpu OUT TARGET... configures build-gpu/ (CUDA on, Release,
# the carried utf8proc of .devtmp/utf8proc) and builds the targets with 16 jobs, logging to
# OUT/build.log; says "build ok" with the seconds, or prints the errors and exits the script.
B=build-gpu
build_gpu() {
  local out=$1
  shift
  local u=$PWD/.devtmp/utf8proc
  { cmake -S . -B $B -G Ninja -DSEQPAR_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DUTF8PROC_INCLUDE_DIR=$u \
      -DUTF8PROC_LIBRARY=$u/libutf8proc.a && cmake --build $B -j 16 --target "$@"; } > $out/build.log 2>&1 \
    && echo "build ok $SECONDS s" || { echo "BUILD FAILED"; grep -E "error" $out/build.log | head -30; exit 1; }
}
