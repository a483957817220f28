#!/usr/bin/env bash
# Runs examples/train as a 3-rank job meeting through a file store, the way a launcher would start
# it, and checks every rank succeeded. Bounded: 120 s, after which every rank is killed.
set -u
train=${1:?usage: example_train_test.sh path/to/train}
dir=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$dir"
}
trap cleanup EXIT
for r in 0 1 2; do
  HVD_RANK=$r HVD_SIZE=3 HVD_RENDEZVOUS="file://$dir" HVD_START_TIMEOUT_SECONDS=30 \
    timeout 120 "$train" --steps 150 >"$dir/out.$r" 2>&1 &
  pids+=($!)
done
rc=0
for i in 0 1 2; do
  wait "${pids[$i]}" || { echo "rank $i failed:"; cat "$dir/out.$i"; rc=1; }
done
pids=()
cat "$dir/out.0"
grep -q "trained on 3 ranks" "$dir/out.0" || { echo "rank 0 did not report success"; rc=1; }
exit $rc
