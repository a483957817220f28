#!/usr/bin/env bash
# deploy/kubernetes: renders the base and every overlay and validates each resource against the
# Kubernetes API schemas (validate_k8s.js, with the kubernetes-models npm package that
# scripts/install-deps.sh installs into tests/deploy/node_modules). Where kubectl is installed its
# `kubectl kustomize` must render the same resources. Exit 77 (skipped) without node or npm.
# Usage: k8s_manifests_test.sh SOURCE_DIR
set -euo pipefail
src=$1
here=$src/tests/deploy
command -v node >/dev/null || { echo "SKIP: node is not installed (Debian packages nodejs, npm)"; exit 77; }
command -v npm >/dev/null || { echo "SKIP: npm is not installed (Debian package npm)"; exit 77; }
if [ ! -d "$here/node_modules/kubernetes-models" ]; then
  echo "FAIL: $here/node_modules lacks kubernetes-models: run scripts/install-deps.sh" \
       "(it runs npm ci there, from tests/deploy/package-lock.json)"
  exit 1
fi
kubectl=()
if command -v kubectl >/dev/null && kubectl kustomize --help >/dev/null 2>&1; then
  kubectl=("$(command -v kubectl)")
else
  echo "note: no kubectl with kustomize here; rendering with tests/deploy/kustomize_lite.js only"
fi
exec node "$here/validate_k8s.js" "$src/deploy/kubernetes" "${kubectl[@]}"
