#!/usr/bin/env bash
# Installs what is missing, builds everything and runs the whole test suite (CPU; CUDA code is
# compiled when nvcc is present, and its tests run on the GPU machine via tools/gpu_check.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
./tools/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build -j "$(nproc)"
ctest --test-dir build --output-on-failure -j "$(nproc)" --timeout 900
