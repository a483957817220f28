#!/usr/bin/env bash
# deploy/systemd/*.service: `systemd-analyze verify` finds nothing to say about either unit, and
# `systemd-analyze security --offline=true` scores the launcher at most 4.0 (the agent is recorded,
# and held under 5.0: its sandbox stops where training programs would break, docs/security.md).
# Also checks that the hardening left the agent what it needs: cgroup delegation, control-group
# kills, GPUs, writable+executable memory for JITs.
# Usage: systemd_units_test.sh SOURCE_DIR HVD_LAUNCHERD HVD_AGENT. Exit 77 (skipped) without
# systemd-analyze or with one too old for --offline (systemd 250+).
set -euo pipefail
src=$1 launcherd=$2 agent=$3
units=$src/deploy/systemd
command -v systemd-analyze >/dev/null || { echo "SKIP: systemd-analyze not installed (Debian package systemd)"; exit 77; }
if ! systemd-analyze security --help 2>&1 | grep -q -- --offline; then
  echo "SKIP: $(systemd-analyze --version | head -1) has no 'security --offline' (systemd 250+)"; exit 77
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
err() { echo "FAIL: $*"; fail=1; }

# verify checks that ExecStart= names an executable, so the copies point /usr/local/bin at the
# binaries just built; nothing else in them changes.
mkdir "$tmp/bin"
ln -s "$launcherd" "$tmp/bin/hvd-launcherd"
ln -s "$agent" "$tmp/bin/hvd-agent"
for u in hvd-launcherd hvd-agent; do
  sed "s#/usr/local/bin/#$tmp/bin/#g" "$units/$u.service" > "$tmp/$u.service"
done

# verify exits 0 on unknown keys and bad values (it only warns), so any output is a failure.
out=$(cd "$tmp" && systemd-analyze verify --man=no ./hvd-launcherd.service ./hvd-agent.service 2>&1) \
  || err "systemd-analyze verify exited $?"
[ -z "$out" ] || err "systemd-analyze verify complained:"$'\n'"$out"

score() {  # prints the unit's overall exposure, e.g. 1.1
  (cd "$tmp" && systemd-analyze security --offline=true "./$1.service" 2>&1) |
    sed -n "s/.*Overall exposure level for $1.service: \([0-9.]*\).*/\1/p"
}
check_score() {  # unit, maximum
  local s
  s=$(score "$1")
  [ -n "$s" ] || { err "no exposure level for $1"; return; }
  echo "$1.service: exposure $s (at most $2)"
  awk -v s="$s" -v m="$2" 'BEGIN { exit !(s <= m) }' || err "$1 exposure $s is above $2"
}
check_score hvd-launcherd 4.0
check_score hvd-agent 5.0

has() { grep -Eq "^$2\$" "$units/$1.service" || err "$1.service lacks '$2'"; }
lacks() { ! grep -Eq "^$2" "$units/$1.service" || err "$1.service must not set '$2': $3"; }
for u in hvd-launcherd hvd-agent; do
  has $u 'NoNewPrivileges=yes'
  has $u 'ProtectSystem=strict'
  has $u 'PrivateTmp=yes'
  has $u 'CapabilityBoundingSet='
  has $u 'RestrictAddressFamilies=.*AF_INET AF_INET6.*'
  has $u 'KillMode=control-group'
done
has hvd-launcherd 'ReadWritePaths=/var/lib/hvd-launcherd'
has hvd-agent 'Delegate=yes'
has hvd-agent 'ReadWritePaths=/var/lib/hvd-agent.*'
lacks hvd-agent 'ProtectControlGroups=yes' "it makes the delegated cgroup tree read-only"
lacks hvd-agent 'PrivateDevices=yes' "ranks need the GPUs' /dev/nvidia*"
lacks hvd-agent 'MemoryDenyWriteExecute=yes' "ranks' JITs (PyTorch, numba) need W+X memory"
lacks hvd-agent 'PrivateUsers=yes' "ranks' files must belong to real users"

[ $fail -eq 0 ] && echo "systemd units: OK"
exit $fail
