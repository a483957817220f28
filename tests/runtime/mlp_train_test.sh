#!/usr/bin/env bash
# Runs examples/mlp_train as a 4-rank job under hvdrun (local mode) and checks that it succeeds,
# learns (rank 0 reports a final test accuracy of at least 0.85), ends with every rank's weights
# identical, and leaves no rank process behind. Bounded: 180 s, after which hvdrun is stopped.
set -u
hvdrun=${1:?usage: mlp_train_test.sh path/to/hvdrun path/to/mlp_train}
mlp_train=${2:?usage: mlp_train_test.sh path/to/hvdrun path/to/mlp_train}
min_accuracy=0.85
out=$(mktemp)
# A tag in every rank's environment, to find this job's processes (and only them) afterwards.
tag="mlp_train_test_$$_$RANDOM"
trap 'rm -f "$out"' EXIT

rc=0
timeout -k 10 180 "$hvdrun" -np 4 -x "MLP_TRAIN_TEST_TAG=$tag" "$mlp_train" --epochs 3 \
  >"$out" 2>&1 || rc=$?
cat "$out"
fail=0
if [ "$rc" -ne 0 ]; then
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    echo "FAIL: hvdrun -np 4 mlp_train did not finish within 180 s (exit $rc)"
  else
    echo "FAIL: hvdrun -np 4 mlp_train exited with $rc"
  fi
  fail=1
fi

line=$(grep -o 'final test accuracy [0-9.]*' "$out" | tail -n1)
accuracy=${line##* }
if [ -z "$accuracy" ]; then
  echo "FAIL: no 'final test accuracy' line in the output"
  fail=1
elif ! awk -v a="$accuracy" -v m="$min_accuracy" 'BEGIN { exit !(a >= m) }'; then
  echo "FAIL: final test accuracy $accuracy is below $min_accuracy"
  fail=1
fi
if ! grep -q 'weights identical on every rank' "$out"; then
  echo "FAIL: rank 0 did not report identical weights on every rank"
  fail=1
fi

# No rank may outlive hvdrun: look for processes carrying this run's tag.
left=()
for env in /proc/[0-9]*/environ; do
  pid=${env#/proc/}; pid=${pid%/environ}
  if { tr '\0' '\n' <"$env"; } 2>/dev/null | grep -qx "MLP_TRAIN_TEST_TAG=$tag"; then
    left+=("$pid")
  fi
done
if [ "${#left[@]}" -ne 0 ]; then
  echo "FAIL: processes of the job still running after hvdrun exited:"
  for pid in "${left[@]}"; do
    echo "  $pid: $({ tr '\0' ' ' <"/proc/$pid/cmdline"; } 2>/dev/null)"
    kill -9 "$pid" 2>/dev/null
  done
  fail=1
fi

[ "$fail" -eq 0 ] && echo "PASS: 4 ranks, final test accuracy $accuracy, weights identical, no rank left"
exit "$fail"
