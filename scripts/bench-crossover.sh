#!/usr/bin/env bash
# Finds where the direct (latency) allreduce and the ring cross over: runs bench/allreduce_bench
# with the direct path forced on and off, interleaved ROUNDS times, for each transport and rank
# count, and prints the median time per size for both. Not a test: docs/performance.md quotes it.
#   scripts/bench-crossover.sh [ROUNDS]     (after ./scripts/build.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
bench=./build/bench/allreduce_bench
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for r in $(seq "$rounds"); do
  for transport in shm tcp; do
    for np in 2 4; do
      for mode in direct ring; do
        max=$([ $mode = direct ] && echo 1G || echo 0)
        "$bench" -np $np --transport $transport --direct-max $max -b 1K -e 2M -f 2 --check 1 |
          awk -v r=$r '!/^#/ {print $1, $6, $9}' >"$out/$transport.$np.$mode.$r"
      done
    done
  done
done
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
for transport in shm tcp; do
  for np in 2 4; do
    echo "# $transport, $np ranks: median time per op (us) over $rounds interleaved rounds"
    printf "%10s %10s %10s %s\n" bytes direct ring faster
    for size in $(awk '{print $1}' "$out/$transport.$np.direct.1"); do
      d=$(cat "$out"/$transport.$np.direct.* | awk -v s=$size '$1==s {print $2}' | median)
      g=$(cat "$out"/$transport.$np.ring.* | awk -v s=$size '$1==s {print $2}' | median)
      w=$(cat "$out"/$transport.$np.*.* | awk -v s=$size '$1==s && $3!=0 {print "WRONG"}' | head -1)
      printf "%10s %10s %10s %s %s\n" "$size" "$d" "$g" \
        "$(awk -v d=$d -v g=$g 'BEGIN {print (d < g ? "direct" : "ring")}')" "$w"
    done
  done
done
