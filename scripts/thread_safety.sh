#!/usr/bin/env bash
# Checks the thread-safety annotations (base/thread_annotations.h, base/mutex.h) with clang's
# -Wthread-safety: the project builds with GCC, where HVD_GUARDED_BY & co. do nothing, so this is
# what makes them more than comments. Every first-party translation unit of runtime/, base/,
# control/, launcherd/, agent/ and cli/ in build/compile_commands.json is parsed (-fsyntax-only,
# no code generated) with its own flags; any finding fails, printing clang's diagnostics.
#   scripts/thread_safety.sh               after scripts/build.sh (needs build/ and its generated
#                                          protobuf headers)
#   scripts/thread_safety.sh agent/ cli/x.cc   only the sources under these paths
#   HVD_TSA_BUILD=dir scripts/thread_safety.sh   another build directory
#   HVD_BUILD_JOBS=n                       parallel clang processes (default: nproc)
# A false positive gets the narrowest HVD_NO_THREAD_SAFETY_ANALYSIS with a comment saying why.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
build=${HVD_TSA_BUILD:-build}
db="$build/compile_commands.json"
clang=${CLANGXX:-$(command -v clang++ || command -v clang++-14 || true)}
if [ -z "$clang" ]; then
  echo "thread_safety: clang++ not found; install it (scripts/install-deps.sh installs clang)" >&2
  exit 1
fi
if [ ! -f "$db" ]; then
  echo "thread_safety: $db is missing; run scripts/build.sh first (it configures $build with" \
    "CMAKE_EXPORT_COMPILE_COMMANDS)" >&2
  exit 1
fi

start=$(date +%s)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# One shell-quoted clang command per line: the compile's own -I/-D/-std flags, minus what only
# the real compile needs, plus the analysis. -Wno-everything first so that only the thread-safety
# groups report (clang's other warnings are not this check's business; GCC's build has its own).
python3 - "$root" "$db" "$clang" "$@" >"$out/cmds" <<'EOF'
import json, os, shlex, sys
root, db, clang, only = sys.argv[1], sys.argv[2], sys.argv[3], tuple(sys.argv[4:])
dirs = ("runtime/", "base/", "control/", "launcherd/", "agent/", "cli/")
seen = set()
for entry in json.load(open(db)):
    path = os.path.normpath(os.path.join(entry["directory"], entry["file"]))
    rel = os.path.relpath(path, root)
    # First-party sources only: not the generated protobuf code under the build directory.
    if not rel.startswith(dirs) or rel.endswith(".pb.cc") or not rel.endswith(".cc") or rel in seen:
        continue
    if only and not rel.startswith(only):
        continue
    seen.add(rel)
    args = entry.get("arguments") or shlex.split(entry["command"])
    keep, skip = [], False
    for a in args[1:]:
        if skip:
            skip = False
            continue
        if a in ("-o", "-MF", "-MT", "-MQ"):
            skip = True
            continue
        if a in ("-c", "-MD", "-MMD") or a.startswith(("-W", "-O", "-g")) or a == path or a == entry["file"]:
            continue
        keep.append(a)
    cmd = [clang, "-fsyntax-only", "-Wno-everything", "-Wthread-safety", "-Wthread-safety-beta",
           "-Werror=thread-safety", "-Werror=thread-safety-beta", "-ferror-limit=0"] + keep + [path]
    print(shlex.join(["cd", entry["directory"]]) + " && " + shlex.join(cmd))
EOF
n=$(wc -l <"$out/cmds")
if [ "$n" -eq 0 ]; then
  echo "thread_safety: no first-party sources in $db" >&2
  exit 1
fi
# Each file's diagnostics go to its own log, printed together at the end (not interleaved).
i=0
while IFS= read -r cmd; do
  i=$((i + 1))
  printf '%s\0' "$cmd >$out/$i.log 2>&1 || { echo \"\$?\" >$out/$i.rc; }"
done <"$out/cmds" | xargs -0 -P "${HVD_BUILD_JOBS:-$(nproc)}" -n 1 bash -c 'eval "$1"' _

failed=0
for rc in "$out"/*.rc; do
  [ -e "$rc" ] || continue
  failed=$((failed + 1))
  cat "${rc%.rc}.log" >&2
done
secs=$(($(date +%s) - start))
if [ "$failed" -ne 0 ]; then
  echo "thread_safety: $failed of $n files have findings (above). Fix the locking, or annotate" \
    "(base/thread_annotations.h; docs/architecture.md says how)." >&2
  exit 1
fi
echo "thread_safety: $n files clean in ${secs} s"
