#!/usr/bin/env bash
# Installs, from Debian's packages, whatever the build and the tests need and this machine lacks.
# Idempotent and quiet when everything is present; used by both README commands and by .ci/run.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc libcpp-httplib-dev
  libsqlite3-dev
  # TLS: control/tls.cc and launcherd/https_front.cc use OpenSSL; scripts/gen-certs.sh openssl(1).
  libssl-dev openssl
  python3 iproute2 procps
  # The Python binding (hvd.torch), its tests and examples/torch_train.py, which trains on
  # scikit-learn's digits dataset (shipped inside python3-sklearn: nothing is downloaded).
  python3-torch python3-pytest python3-sklearn
  # Python's headers for hvd.common._fastcall (python/README.md), against the stable ABI.
  python3-dev
  # OpenBLAS for Debian's torch: without it torch falls back to the reference BLAS, ~10x slower
  # here (docs/performance-torch.md), which would swamp every training-step measurement.
  libopenblas0
  libssh-dev openssh-client openssh-server
  # scripts/fuzz.sh: clang with libFuzzer and the sanitizers' runtimes (tests/fuzz/README.md).
  clang libclang-rt-14-dev
)

# --runtime: only what the installed binaries need to run, for deploy/Containerfile's last stage
# (tests/deploy/containerfile_test.sh checks that these cover every library the binaries link).
runtime_packages=(libgrpc++1.51 libprotobuf32 libsqlite3-0 libssh-4 libcpp-httplib0.11 libssl3
                  tini procps ca-certificates)
mode=${1:-}
if [ "$mode" = --runtime ]; then packages=("${runtime_packages[@]}"); fi

# tests/deploy validates the Kubernetes manifests with npm packages pinned by its
# package-lock.json, installed into tests/deploy/node_modules (git-ignored) so that the test runs
# offline afterwards. Skipped for --runtime, and where the checkout has no tests/deploy (the
# Containerfile's first step).
install_node_modules() {
  local dir
  dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/tests/deploy"
  [ "$mode" != --runtime ] && [ -f "$dir/package-lock.json" ] || return 0
  [ -d "$dir/node_modules/kubernetes-models" ] && return 0
  if ! command -v npm >/dev/null; then
    if [ "$(id -u)" -ne 0 ]; then
      echo "install-deps: npm is missing (sudo apt-get install -y nodejs npm); tests/deploy's" \
           "Kubernetes check will be skipped" >&2
      return 0
    fi
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
  fi
  echo "install-deps: npm ci in tests/deploy"
  npm ci --prefix "$dir" --no-audit --no-fund --ignore-scripts --loglevel=error >/dev/null
}

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then install_node_modules; exit 0; fi

if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: missing Debian packages: ${missing[*]}" >&2
  echo "install-deps: run this script as root (or: sudo apt-get install -y ${missing[*]})" >&2
  exit 1
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# openssh-server is here for the SSH tests, which start their own sshd on a test address; its
# package scripts would also start the system's sshd on port 22. A policy-rc.d forbids service
# starts for the install (only when the machine has none; removed afterwards).
policy=/usr/sbin/policy-rc.d
if [[ " ${missing[*]} " == *" openssh-server "* && ! -e $policy ]]; then
  printf '#!/bin/sh\nexit 101\n' > "$policy"
  chmod 755 "$policy"
  trap 'rm -f "$policy"' EXIT
fi
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
install_node_modules
