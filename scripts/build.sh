#!/usr/bin/env bash
# Configures and builds hvd into ./build (Release, Ninja). Extra arguments go to CMake.
set -euo pipefail
cd "$(dirname "$0")/.."
"$(pwd)/scripts/install-deps.sh"
jobs=${HVD_BUILD_JOBS:-$(nproc)}
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build build -j "$jobs"
