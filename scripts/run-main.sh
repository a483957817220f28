#!/usr/bin/env bash
# Sets up, builds and runs the main job: the example MLP (examples/mlp_train.cc) trained
# data-parallel on 4 ranks on this host through hvdrun, then hvd's allreduce benchmark (sizes
# 4 KiB to 256 MiB, correctness checked) and the fusion benchmark, which start their own ranks.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh
./build/cli/hvdrun -np "${NP:-4}" ./build/examples/mlp_train
./build/bench/allreduce_bench -np "${NP:-4}" -b 4K -e 256M -f 4
./build/bench/fusion_bench -np "${NP:-4}"
