#!/usr/bin/env bash
# deploy/Containerfile is not built here: no podman, buildah or docker on the CI machines (and no
# registry to pull the Debian base image from). What can be checked without building it:
#  - every file it COPYs from the checkout exists;
#  - `scripts/install-deps.sh --runtime` (its last stage) names packages that provide every shared
#    library the built binaries link (their dependency closure, as dpkg knows it here);
#  - the paths the Kubernetes manifests run (/usr/bin/tini, /usr/local/bin/hvd-*) are what the
#    image installs (the runtime list has tini; CMake installs each binary to bin/).
# Usage: containerfile_test.sh SOURCE_DIR BINARY...   Exit 77 (skipped) without dpkg.
set -euo pipefail
src=$1; shift
cf=$src/deploy/Containerfile
command -v dpkg-query >/dev/null || { echo "SKIP: not a Debian system (no dpkg-query)"; exit 77; }
fail=0
err() { echo "FAIL: $*"; fail=1; }

while read -r from; do
  [ -e "$src/$from" ] || err "Containerfile copies $from, which the checkout lacks"
done < <(awk '$1 == "COPY" && $2 !~ /^--/ { print $2 }' "$cf")

# The runtime list, as the script defines it.
runtime=$(sed -n '/^runtime_packages=(/,/)/p' "$src/scripts/install-deps.sh" |
          sed 's/runtime_packages=(//; s/)//' | tr -s ' \n' ' ')
[ -n "$runtime" ] || err "scripts/install-deps.sh defines no runtime_packages"
grep -q -- 'install-deps.sh --runtime' "$cf" || err "the Containerfile's last stage does not use --runtime"

# Their closure over Depends/Pre-Depends, among the packages installed here (one dpkg-query).
declare -A deps=() closure=()
while IFS=$'\t' read -r p d; do deps[$p]=$d; done \
  < <(dpkg-query -W -f='${Package}\t${Pre-Depends}, ${Depends}\n' 2>/dev/null)
queue=($runtime)
while [ ${#queue[@]} -gt 0 ]; do
  p=${queue[0]%%:*}; queue=("${queue[@]:1}")
  [ -n "$p" ] && [ -z "${closure[$p]:-}" ] || continue
  closure[$p]=1
  queue+=($(tr ',' '\n' <<<"${deps[$p]:-}" | sed 's/|.*//; s/(.*)//' | tr -d ' '))
done
# Every library the binaries link, and the package each comes from (one dpkg -S).
declare -A users=()
for bin in "$@"; do
  [ -x "$bin" ] || { err "$bin is not built"; continue; }
  for lib in $(ldd "$bin" | awk '/=> \//{print $3}'); do
    real=$(readlink -f "$lib")
    users[$real]="${users[$real]:-} $(basename "$bin")"
  done
done
# dpkg may list a library under /lib (merged /usr): ask for both, key on the path without /usr.
declare -A owner=()
asks=()
for lib in "${!users[@]}"; do asks+=("$lib" "${lib#/usr}"); done
while IFS= read -r line; do
  f=${line#*: }
  owner[${f#/usr}]=${line%%:*}
done < <(dpkg -S "${asks[@]}" 2>/dev/null || true)
for lib in "${!users[@]}"; do
  pkg=${owner[${lib#/usr}]:-}
  if [ -z "$pkg" ]; then err "${users[$lib]# } link $lib, which no Debian package provides"
  elif [ -z "${closure[$pkg]:-}" ]; then
    err "${users[$lib]# } link $lib from $pkg, which install-deps.sh --runtime does not bring"
  fi
done

grep -qw tini <<<"$runtime" || err "the runtime packages lack tini (the manifests' PID 1)"
grep -q 'ENTRYPOINT \["/usr/bin/tini"' "$cf" || err "the Containerfile's entrypoint is not /usr/bin/tini"
for b in hvd-launcherd hvd-agent hvd-worker-wrapper hvdrun; do
  grep -rqE "install\(TARGETS $b RUNTIME DESTINATION bin\)" "$src"/*/CMakeLists.txt ||
    err "no CMake rule installs $b to bin/ (/usr/local/bin in the image)"
done
for m in $(grep -rhoE '/usr/local/bin/[a-z-]+' "$src/deploy/kubernetes"); do
  b=${m##*/}
  grep -rqE "install\(TARGETS $b RUNTIME" "$src"/*/CMakeLists.txt || err "the manifests run $m, which the image lacks"
done

[ $fail -eq 0 ] && echo "Containerfile: OK (${#closure[@]} packages in the runtime closure; $# binaries covered)"
exit $fail
