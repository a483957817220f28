#!/usr/bin/env bash
# Fails when libhvd.so exports anything but the public API (hvd_* C functions, hvd::<Public>
# C++ symbols). A leaked internal symbol (or a bundled protobuf/abseil one) could bind to another
# copy in a host process such as PyTorch.
set -euo pipefail
lib=${1:?usage: check_exports.sh path/to/libhvd.so}
syms=$(nm -D --defined-only "$lib" | awk '{print $3}' | c++filt)
bad=$(printf '%s\n' "$syms" | grep -vE '^(hvd_[a-z_0-9]+|hvd::[A-Z][A-Za-z]*(::[~A-Za-z_]+)?\(.*|typeinfo (name )?for hvd::[A-Z][A-Za-z]*|HVD_0)(@@HVD_0)?$' || true)
count=$(printf '%s\n' "$syms" | grep -c . || true)
if [ -n "$bad" ]; then
  echo "libhvd.so exports symbols outside the public API:" >&2
  printf '%s\n' "$bad" | head -20 >&2
  exit 1
fi
printf '%s\n' "$syms" | grep -q '^hvd_init' || { echo "hvd_init is not exported" >&2; exit 1; }
printf '%s\n' "$syms" | grep -q '^hvd::Init()' || { echo "hvd::Init() is not exported" >&2; exit 1; }
echo "libhvd.so exports $count symbols, all public API"
