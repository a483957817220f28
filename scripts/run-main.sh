#!/usr/bin/env bash
# Sets up, builds and runs the main job: hvd's allreduce benchmark on 4 ranks on this host
# (sizes 4 KiB to 256 MiB, correctness checked), then the fusion benchmark. Until hvdrun exists
# the benchmark starts its own rank processes.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh
./build/bench/allreduce_bench -np "${NP:-4}" -b 4K -e 256M -f 4
./build/bench/fusion_bench -np "${NP:-4}"
