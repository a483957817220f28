#!/usr/bin/env bash
# Sets up, builds and runs every test. This is what CI runs (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh
# Clang's -Wthread-safety over every first-party source (GCC ignores HVD_GUARDED_BY & co.): a lock
# taken in the wrong place fails here, in about a minute on two cores. HVD_SKIP_THREAD_SAFETY=1
# leaves it out.
if [ "${HVD_SKIP_THREAD_SAFETY:-0}" != 1 ]; then
  ./scripts/thread_safety.sh
fi
# Tests start rank processes; the harness reaps them all, and this checks nothing survived.
ctest --test-dir build --output-on-failure --timeout 600 -j "${HVD_TEST_JOBS:-1}"
# Only this checkout's binaries (ctest runs them by absolute path): another checkout's tests on the
# same machine are not this suite's leftovers.
left=$(pgrep -f "$(pwd)/build/(tests|bench)/" || true)
if [ -n "$left" ]; then
  echo "test processes left running after the suite:" >&2
  ps -o pid,args -p $left >&2 || true
  exit 1
fi
# The libFuzzer targets (tests/fuzz/README.md): their own clang build in build-fuzz, then a minute
# of fuzzing in all; any crash fails the suite with its reproducer. HVD_SKIP_FUZZ=1 leaves it out.
if [ "${HVD_SKIP_FUZZ:-0}" != 1 ]; then
  ./scripts/fuzz.sh
fi
