#!/bin/bash
# Sourced by tools/prebuild_gpu.sh (development machine) and build_gpu.sh (GPU machine): src_hash DIR prints one hash
# of everything a seqpar / test_cuda build of the tree DIR compiles (CMakeLists.txt, src/, tests/, bench/diag/), by
# path and content, so that a binary built on one machine is used on the other only for the same sources.
src_hash() {
  (cd "$1" && find CMakeLists.txt src tests bench/diag -type f ! -name '*.pyc' -print0 2> /dev/null | LC_ALL=C sort -z |
    xargs -0 sha256sum | sha256sum | cut -d' ' -f1)
}
