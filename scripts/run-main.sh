#!/usr/bin/env bash
# Sets up, builds and runs the main job: a PyTorch CNN (examples/torch_train.py) trained
# data-parallel with hvd.torch on scikit-learn's digits on 4 ranks on this host through hvdrun
# (it exits non-zero unless every rank ends with bit-identical parameters and the test accuracy
# reaches 90%); then the C++ example MLP (examples/mlp_train.cc) the same way; then hvd's
# allreduce benchmark (sizes 4 KiB to 256 MiB, correctness checked) and the fusion benchmark,
# which start their own ranks.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh
# Debian's python3-torch is /usr/bin/python3's; another python3 may come first on PATH.
PYTHONPATH="$PWD/build/python${PYTHONPATH:+:$PYTHONPATH}" \
  ./build/cli/hvdrun -np "${NP:-4}" /usr/bin/python3 examples/torch_train.py
./build/cli/hvdrun -np "${NP:-4}" ./build/examples/mlp_train
./build/bench/allreduce_bench -np "${NP:-4}" -b 4K -e 256M -f 4
./build/bench/fusion_bench -np "${NP:-4}"
