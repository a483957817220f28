#!/bin/sh
# Runs one hvd.torch test command for ctest: run_ctest.sh PYTHON COMMAND...
# When PYTHON cannot import torch or pytest (Debian: python3-torch, python3-pytest), prints why
# and exits 77, which ctest reports as skipped.
py=$1
shift
missing=$("$py" -c 'import importlib.util as u
print(" ".join(m for m in ("torch", "pytest") if u.find_spec(m) is None))' 2>/dev/null)
if [ $? -ne 0 ]; then
  echo "SKIPPED: $py is not a working Python interpreter (set HVD_TEST_PYTHON)"
  exit 77
fi
if [ -n "$missing" ]; then
  echo "SKIPPED: $py cannot import: $missing (install python3-torch and python3-pytest)"
  exit 77
fi
exec "$@"
