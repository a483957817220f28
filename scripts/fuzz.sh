#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz/) with clang, AddressSanitizer and UBSan in build-fuzz,
# then runs each one from its seed corpus for a bounded time. Fails on any crash, leak, sanitizer
# report, hang or broken property, printing the target, the reproducer and how to rerun it.
#   scripts/fuzz.sh                      all targets, HVD_FUZZ_SECONDS (default 60) in all
#   scripts/fuzz.sh host_spec_fuzz ...   only these
#   HVD_FUZZ_SECONDS=600 scripts/fuzz.sh a longer run; new inputs stay in build-fuzz/fuzz-corpus/
# tests/fuzz/README.md has the targets, the properties each checks, and how to add a seed.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
"$root/scripts/install-deps.sh"

all=(kv_protocol_fuzz host_spec_fuzz spec_limits_fuzz config_file_fuzz kv_server_fuzz rest_fuzz)
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=("${all[@]}")
total=${HVD_FUZZ_SECONDS:-60}
per=$(( total / ${#targets[@]} ))
[ "$per" -lt 1 ] && per=1
jobs=${HVD_BUILD_JOBS:-$(nproc)}
dir=build-fuzz

start=$(date +%s)
# -O1, the fuzzers' usual level, with line tables only (file:line in sanitizer reports): a quarter
# quicker to compile than -O1 -g, which counts in CI's budget.
flags="-O1 -gline-tables-only"
cmake -S . -B "$dir" -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DHVD_FUZZ=ON -DHVD_BUILD_TESTS=OFF -DHVD_BUILD_BENCH=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=$flags" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=$flags" >/dev/null
cmake --build "$dir" -j "$jobs" --target "${targets[@]}"
echo "fuzz: built ${#targets[@]} targets in $(( $(date +%s) - start )) s; running each ${per} s"

# UBSan reports abort (a crash libFuzzer saves); ASan's leak check runs after each input.
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
failed=0
for t in "${targets[@]}"; do
  bin="$dir/tests/fuzz/$t"
  seeds="tests/fuzz/corpus/$t"
  # New inputs go to build-fuzz, never into the repository's seed corpus.
  work="$dir/fuzz-corpus/$t"
  artifacts="$dir/fuzz-artifacts/$t"
  log="$dir/fuzz-logs/$t.log"
  rm -rf "$artifacts"  # a reproducer listed below is this run's
  mkdir -p "$work" "$artifacts" "$(dirname "$log")"
  dict=()
  [ -f "tests/fuzz/$t.dict" ] && dict=("-dict=tests/fuzz/$t.dict")
  # -timeout: one input running this long is a hang (the server targets wait up to 15 s each).
  # -seed: the same mutations on every run (HVD_FUZZ_SEED=0 draws one), so a CI failure replays.
  if "$bin" -max_total_time="$per" -seed="${HVD_FUZZ_SEED:-1}" -timeout=30 -rss_limit_mb=2560 -max_len=8192 \
      -artifact_prefix="$artifacts/" -print_final_stats=1 "${dict[@]}" "$work" "$seeds" \
      >"$log" 2>&1; then
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || true)
    echo "fuzz: $t: ${runs:-?} inputs in ${per} s, no finding"
  else
    failed=1
    echo "fuzz: $t FAILED; the end of its log ($log):" >&2
    tail -n 40 "$log" >&2
    for f in "$artifacts"/*; do
      [ -e "$f" ] || continue
      echo "fuzz: reproducer $f; rerun it with: $bin $f" >&2
    done
  fi
done
echo "fuzz: done in $(( $(date +%s) - start )) s"
exit "$failed"
