#!/usr/bin/env bash
# Tensor fusion across hosts with latency (issue 17, docs/performance-fusion.md "Tensor fusion across
# delayed links"): bench/fusion_bench's ResNet-50-shaped step (161 gradients, 102 MB) on 2
# namespace hosts, one rank each, links shaped to RATE both ways with a one-way DELAY; fused
# (the default threshold) and unfused (HVD_FUSION_THRESHOLD=0) launches interleaved, ROUNDS of
# each, in one cluster per delay. Prints each launch's median step (the slowest rank's) and the
# ratio unfused / fused of the medians over the rounds.
#
#   sudo tests/cluster/fusion_delay_bench.sh [RATE] [DELAYS] [ROUNDS]
#        defaults: 10gbit "0us 100us" 3
#
# The delay is tc netem's where the kernel has sch_netem, else the userspace relay's
# (tests/cluster/delay_line.h), whose own cost caps the links below RATE: the 0us run shows that
# baseline. Needs root and a build in $BUILD (default ./build).
set -euo pipefail
cd "$(dirname "$0")/../.."
B=$(realpath "${BUILD:-build}")
RATE=${1:-10gbit}
DELAYS=${2:-0us 100us}
ROUNDS=${3:-3}
STEPS=${STEPS:-10}
for f in "$B/tests/hvd_netns_cluster" "$B/cli/hvdrun" "$B/bench/fusion_bench"; do
  [ -x "$f" ] || { echo "fusion_delay_bench: $f is missing; build first" >&2; exit 2; }
done
[ "$(id -u)" -eq 0 ] || { echo "fusion_delay_bench: needs root (network namespaces)" >&2; exit 2; }

echo "# machine: $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), $(uname -sr)"
echo "# 2 hosts, one rank each, links $RATE both ways; $ROUNDS rounds x $STEPS steps per launch"
for delay in $DELAYS; do
  out=$("$B/tests/hvd_netns_cluster" --hosts 2 --rate "$RATE" --delay "$delay" -- sh -c "
    for r in \$(seq $ROUNDS); do
      for t in default 0; do
        x=''; [ \$t = 0 ] && x='-x HVD_FUSION_THRESHOLD=0'
        ms=\$('$B/cli/hvdrun' -H \$HVD_NETNS_HOSTS \$x '$B/bench/fusion_bench' --rounds 1 \
              --steps $STEPS --warmup 2 | awk '/<stdout>: +env /{ print \$5, \$8 }')
        [ -n \"\$ms\" ] || { echo \"fusion_delay_bench: a launch failed (threshold \$t)\" >&2; exit 1; }
        echo \"\$t \$ms\"
      done
    done" 2>&1 | tee /dev/stderr | grep -E '^(default|0) ')
  echo "## one-way delay $delay"
  echo "$out" | awk '{ printf "  %-8s step %8.2f ms  %5.1f collectives/step\n", ($1 == "0" ? "unfused" : "fused"), $2, $3 }'
  echo "$out" | awk '
    function median(a, n,   i, j, t) {
      for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
      return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
    $1 == "default" { f[++nf] = $2 } $1 == "0" { u[++nu] = $2 }
    END { mf = median(f, nf); mu = median(u, nu)
          printf "  median: fused %.2f ms, unfused %.2f ms: fused %.2fx unfused\n", mf, mu, mu / mf }'
done
