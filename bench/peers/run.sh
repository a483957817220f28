#!/usr/bin/env bash
# The side-by-side allreduce benchmark, in one command (as root on Debian):
#   bench/peers/run.sh [compare.py flags]      e.g. --rounds 5 --np 2 --sizes 4K,64M
# Installs the peers (Open MPI, Gloo, PyTorch: Debian's packages; they are not build or test
# dependencies), builds hvd and the peers' programs, then runs bench/peers/compare.py: hvd over
# shared memory, TCP, the full runtime path (in place and out of place) and hvd.torch against
# Open MPI (shared memory and TCP), Gloo and torch.distributed on the same sizes and rank counts,
# the launch times and the fusion benchmark, and prints the tables, the ratios and the targets
# (bench/peers/targets.py). Not a test: docs/performance.md quotes it.
set -euo pipefail
cd "$(dirname "$0")/../.."

peers=(libopenmpi-dev openmpi-bin libgloo-dev python3-torch)
missing=()
for p in "${peers[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "bench/peers/run.sh: missing Debian packages: ${missing[*]}; run as root" >&2
    exit 2
  fi
  echo "bench/peers/run.sh: installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
fi
./scripts/build.sh
for prog in mpi_allreduce gloo_allreduce launch_hello_mpi launch_hello_hvd; do
  if [ ! -x "build/bench/peers/$prog" ]; then
    echo "bench/peers/run.sh: build/bench/peers/$prog was not built (CMake did not find its" \
      "library; see build/CMakeCache.txt: MPI_C_FOUND, GLOO_LIBRARY)" >&2
    exit 1
  fi
done
exec python3 bench/peers/compare.py "$@"
