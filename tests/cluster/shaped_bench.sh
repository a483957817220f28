#!/usr/bin/env bash
# The shaped-link benchmark of docs/performance-fusion.md ("Across hosts"): 2, 3 and 4 test hosts
# (network namespaces, tests/cluster/netns.h) whose links are shaped to RATE both ways, one rank
# per host.
#   1. hvd::Allreduce's bus bandwidth for large buffers (hvd_allreduce_hosts) against the rate;
#   2. the example MLP's time per epoch on N hosts against 1 host (weak scaling: the same samples
#      per rank), and the same for N ranks on one host over loopback: the namespaces share this
#      machine's CPUs, so that column shows what CPU sharing alone costs. The time per epoch is the difference between a
#      run of E2 and one of E1 epochs divided by E2 - E1, which cancels start-up and probe time;
#      the median of REPS such pairs is reported.
#
#   sudo tests/cluster/shaped_bench.sh [RATE]    # RATE: a tc rate, default 1gbit
#
# Needs root and a build in $BUILD (default ./build). Prints the results as Markdown tables.
# Every cluster it makes is removed by hvd_netns_cluster, also on Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/../.."
B=$(realpath "${BUILD:-build}")
RATE=${1:-1gbit}
REPS=${REPS:-3}
E1=1
E2=4
MLP_ARGS="--hidden 512 --samples-per-rank 1024"
cluster="$B/tests/hvd_netns_cluster"
for f in "$cluster" "$B/tests/hvd_allreduce_hosts" "$B/cli/hvdrun" "$B/examples/mlp_train"; do
  [ -x "$f" ] || { echo "shaped_bench: $f is missing; build first (scripts/build.sh)" >&2; exit 2; }
done
[ "$(id -u)" -eq 0 ] || { echo "shaped_bench: needs root (network namespaces)" >&2; exit 2; }

# Seconds one hvdrun of the MLP takes on a fresh cluster: $1 hosts, $2 slots each, $3 epochs,
# $4 rate ("" for none).
mlp_seconds() {
  local shape=()
  [ -n "$4" ] && shape=(--rate "$4")
  "$cluster" --hosts "$1" --slots "$2" "${shape[@]}" -- sh -c "
    s=\$(date +%s.%N)
    $B/cli/hvdrun -H \$HVD_NETNS_HOSTS $B/examples/mlp_train $MLP_ARGS --epochs $3 >/dev/null
    e=\$(date +%s.%N)
    awk -v s=\$s -v e=\$e 'BEGIN { printf \"%.3f\\n\", e - s }'" 2>/dev/null
}

# Median over REPS of the time per epoch: $1 hosts, $2 slots, $3 rate.
epoch_seconds() {
  local samples=()
  for _ in $(seq "$REPS"); do
    local t1 t2
    t1=$(mlp_seconds "$1" "$2" "$E1" "$3")
    t2=$(mlp_seconds "$1" "$2" "$E2" "$3")
    samples+=("$(awk -v a="$t1" -v b="$t2" -v d=$((E2 - E1)) 'BEGIN { printf "%.4f", (b - a) / d }')")
  done
  printf '%s\n' "${samples[@]}" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'
}

rate_gbps=$(awk -v r="$RATE" 'BEGIN {
  n = r + 0; u = substr(r, length(n "") + 1)
  s = u == "gbit" ? 1e9 : u == "mbit" ? 1e6 : u == "kbit" ? 1e3 : 1
  printf "%.3f", n * s / 1e9 }')

echo "# machine: $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), $(uname -sr)"
echo "# links: $RATE ($rate_gbps Gbit/s) both ways per host, tc tbf"
echo
echo "## hvd::Allreduce bus bandwidth (float32 sum, one rank per host, slowest rank's time)"
echo
echo "| hosts | size | time/op (ms) | busbw (Gbit/s) | busbw / link rate |"
echo "|---|---|---|---|---|"
for n in 2 3 4; do
  "$cluster" --hosts "$n" --rate "$RATE" -- sh -c \
    "$B/cli/hvdrun -H \$HVD_NETNS_HOSTS $B/tests/hvd_allreduce_hosts --sizes 16M,64M,256M --iters 3" \
    2>/dev/null | awk -v n="$n" -v r="$rate_gbps" '
      /<stdout>: +[0-9]/ { sub(/.*<stdout>:/, ""); printf "| %d | %d MiB | %.1f | %.3f | %.2f |\n",
                           n, $1 / 1048576, $2, $4, $4 / r }'
done
echo
echo "## Example MLP ($MLP_ARGS), time per epoch, median of $REPS"
echo
echo "| ranks | 1 host (s) | N hosts, $RATE links (s) | N ranks on 1 host, loopback (s) | scaling efficiency T1/TN (hosts) | T1/TN (loopback) |"
echo "|---|---|---|---|---|---|"
t1=$(epoch_seconds 1 1 "$RATE")
echo "| 1 | $t1 | - | - | 1.00 | - |"
for n in 2 3 4; do
  th=$(epoch_seconds "$n" 1 "$RATE")
  tl=$(epoch_seconds 1 "$n" "")
  awk -v n="$n" -v t1="$t1" -v th="$th" -v tl="$tl" \
    'BEGIN { printf "| %d | - | %.3f | %.3f | %.2f | %.2f |\n", n, th, tl, t1 / th, t1 / tl }'
done
