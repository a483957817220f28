#!/usr/bin/env bash
# The one command to run on a machine with a GPU (docs/gpu.md, "The GPU check"):
#
#   scripts/gpu-check.sh [REPORT] [--build-dir DIR] [--reuse]
#
# Builds the runtime alone (no control plane: no gRPC or protobuf needed) with the CUDA plugin,
# runs every GPU test (ctest -L gpu, and hvd.torch's CUDA tests with the plain python3), runs the
# GPU bench and writes one report: REPORT, else ${OUT:-.}/gpu-report.md. Every step has a timeout
# and a failing step is reported, not fatal; the whole run stays inside HVD_GPU_CHECK_BUDGET
# seconds (default 540: the GPU machine gives a command 10 minutes).
#
#   --build-dir DIR  where to build (default build-gpu)
#   --reuse          keep an already configured DIR's cache (no new configure arguments)
#
# Exit status: 0 when every step ran, no test failed and hvd.torch's CUDA tests ran and passed;
# else 1 (on a machine without a GPU every GPU test is skipped, the report says why: status 1).
# Environment: HVD_GPU_CHECK_PYTHON (default python3), HVD_GPU_CHECK_CUDA_ARCH (default: the
# GPU's compute capability from nvidia-smi, else 90), HVD_GPU_CHECK_JOBS (default nproc).
set -u
cd "$(dirname "$0")/.."
SRC=$(pwd)
START=$(date +%s)
BUDGET=${HVD_GPU_CHECK_BUDGET:-540}
DEADLINE=$((START + BUDGET))
PY=${HVD_GPU_CHECK_PYTHON:-python3}
JOBS=${HVD_GPU_CHECK_JOBS:-$(nproc)}
BUILD=build-gpu
REUSE=0
REPORT=
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) BUILD=$2; shift 2 ;;
    --build-dir=*) BUILD=${1#*=}; shift ;;
    --reuse) REUSE=1; shift ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    -*) echo "gpu-check.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) REPORT=$1; shift ;;
  esac
done
REPORT=${REPORT:-${OUT:-.}/gpu-report.md}
mkdir -p "$(dirname "$REPORT")" || exit 1
case "$BUILD" in /*) ;; *) BUILD=$SRC/$BUILD ;; esac
WORK=$(mktemp -d "${TMPDIR:-/tmp}/hvd-gpu-check.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
STEPS=()     # "name|status|seconds|note|log" per step, in order
FAILED=0

left() { echo $((DEADLINE - $(date +%s))); }
log() { echo "[gpu-check $(($(date +%s) - START))s] $*" >&2; }

# step NAME CAP RESERVE LOGFILE COMMAND...: runs COMMAND with a timeout of CAP seconds, less when
# the budget left minus RESERVE (what the later steps need) is smaller; records the outcome.
# Exit 77 from COMMAND means skipped.
step() {
  local name=$1 cap=$2 reserve=$3 out=$4
  shift 4
  local t=$(( $(left) - reserve ))
  [ "$t" -gt "$cap" ] && t=$cap
  if [ "$t" -lt 5 ]; then
    STEPS+=("$name|not run|0|no time left in the ${BUDGET} s budget")
    FAILED=1
    log "$name: not run (no time left)"
    return 1
  fi
  log "$name (timeout ${t}s)"
  local s0 rc
  s0=$(date +%s)
  timeout -k 10 "$t" "$@" >"$out" 2>&1
  rc=$?
  local secs=$(($(date +%s) - s0)) status note=""
  case $rc in
    0) status=ok
       # A bench (or test) that found nothing to run says so on its first line.
       if head -n 1 "$out" | grep -q -i '^skipped'; then
         status=skipped note=$(head -n 1 "$out" | cut -c1-300)
       fi ;;
    77) status=skipped; note=$(grep -m1 -i 'skip' "$out" | cut -c1-300) ;;
    124|137) status="timed out"; note="after ${t} s"; FAILED=1 ;;
    *) status=failed; note="exit $rc; see its log below"; FAILED=1 ;;
  esac
  STEPS+=("$name|$status|$secs|$note|$out")
  log "$name: $status (${secs}s)"
  return $rc
}

tail_of() { [ -s "$1" ] && { echo '```'; tail -n "${2:-40}" "$1"; echo '```'; }; }

# ---- the machine -------------------------------------------------------------------------------
{
  echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  echo "host: $(hostname), $(nproc) cores"
  dirty=$(git -C "$SRC" status --porcelain 2>/dev/null | head -1)
  echo "commit: $(git -C "$SRC" rev-parse --short HEAD 2>/dev/null || echo unknown)${dirty:+ (with local changes)}"
  if command -v nvidia-smi >/dev/null 2>&1; then
    echo "GPU (nvidia-smi): $(timeout 20 nvidia-smi \
      --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader 2>&1 |
      paste -sd';' -)"
    echo "driver's CUDA: $(timeout 20 nvidia-smi 2>/dev/null | grep -o 'CUDA Version: [0-9.]*' |
      head -1)"
  else
    echo "GPU (nvidia-smi): none (nvidia-smi not found)"
  fi
  NVCC=/usr/local/cuda/bin/nvcc
  command -v nvcc >/dev/null 2>&1 && NVCC=$(command -v nvcc)
  echo "CUDA toolkit: $([ -x "$NVCC" ] && "$NVCC" --version | grep -o 'release [0-9.]*, V[0-9.]*' ||
    echo "no nvcc")"
  echo "cmake: $(cmake --version | head -1); ninja: $(ninja --version 2>&1)"
} >"$WORK/machine.txt"

# The GPU's compute capability picks the architecture (H200: 9.0 -> 90).
ARCH=${HVD_GPU_CHECK_CUDA_ARCH:-}
if [ -z "$ARCH" ] && command -v nvidia-smi >/dev/null 2>&1; then
  ARCH=$(timeout 20 nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null |
    head -1 | tr -d ' .')
  case "$ARCH" in ''|*[!0-9]*) ARCH= ;; esac
fi
ARCH=${ARCH:-90}

# ---- NCCL: the toolkit's, else the pip package nvidia-nccl's -----------------------------------
NCCL_INC= NCCL_LIB= NCCL_FROM=
[ -f /usr/local/cuda/include/nccl.h ] && NCCL_INC=/usr/local/cuda/include NCCL_FROM=/usr/local/cuda
[ -e /usr/local/cuda/lib64/libnccl.so.2 ] && NCCL_LIB=/usr/local/cuda/lib64/libnccl.so.2
if [ -z "$NCCL_INC" ] || [ -z "$NCCL_LIB" ]; then
  # nvidia-nccl-cu1x puts include/nccl.h and lib/libnccl.so.2 under the namespace package nvidia.
  PIP_NCCL=$(timeout 60 "$PY" - 2>/dev/null <<'EOF'
import glob, os
try:
    import nvidia
    roots = list(nvidia.__path__)
except ImportError:
    roots = []
found = {"nccl.h": "", "libnccl.so.2": ""}
for root in roots:
    for name in found:
        hits = sorted(glob.glob(os.path.join(root, "**", name), recursive=True))
        if hits and not found[name]:
            found[name] = hits[0]
print(found["nccl.h"])
print(found["libnccl.so.2"])
EOF
)
  PIP_H=$(sed -n 1p <<<"$PIP_NCCL")
  PIP_LIB=$(sed -n 2p <<<"$PIP_NCCL")
  if [ -z "$NCCL_INC" ] && [ -n "$PIP_H" ]; then
    NCCL_INC=$(dirname "$PIP_H") NCCL_FROM="pip nvidia-nccl ($(dirname "$(dirname "$PIP_H")"))"
  fi
  [ -z "$NCCL_LIB" ] && [ -n "$PIP_LIB" ] && NCCL_LIB=$PIP_LIB
fi
# The plugin loads NCCL at run time: point it at the one found when the toolkit has none.
if [ -n "$NCCL_LIB" ] && [ "$NCCL_LIB" != /usr/local/cuda/lib64/libnccl.so.2 ]; then
  export HVD_NCCL_LIBRARY=$NCCL_LIB
fi
nccl_h_version() {
  [ -n "$NCCL_INC" ] || { echo "no nccl.h"; return; }
  awk '/#define NCCL_(MAJOR|MINOR|PATCH)[ \t]/ {v[$2]=$3}
       END {printf "%s.%s.%s", v["NCCL_MAJOR"], v["NCCL_MINOR"], v["NCCL_PATCH"]}' "$NCCL_INC/nccl.h"
}
NCCL_RUNTIME=$(timeout 30 "$PY" -c 'import ctypes, sys
v = ctypes.c_int(0)
ctypes.CDLL(sys.argv[1]).ncclGetVersion(ctypes.byref(v))
print(v.value)' "${NCCL_LIB:-libnccl.so.2}" 2>/dev/null || echo "not loadable")
{
  echo "NCCL: nccl.h $(nccl_h_version) from ${NCCL_FROM:-nowhere}; library ${NCCL_LIB:-none found}" \
       "(ncclGetVersion: $NCCL_RUNTIME)${HVD_NCCL_LIBRARY:+; HVD_NCCL_LIBRARY=$HVD_NCCL_LIBRARY}"
  echo "CUDA runtime (the toolkit's libcudart, linked by the plugin): $(timeout 30 "$PY" -c '
import ctypes, glob
libs = sorted(glob.glob("/usr/local/cuda/lib64/libcudart.so.*"))
v = ctypes.c_int(0)
ctypes.CDLL(libs[-1]).cudaRuntimeGetVersion(ctypes.byref(v))
print("%d.%d (%s)" % (v.value // 1000, v.value % 1000 // 10, libs[-1]))' 2>/dev/null || echo "not found")"
  echo "python: $(command -v "$PY") $("$PY" -c 'import sys; print(sys.version.split()[0])' 2>&1)"
  echo "torch: $(timeout 120 "$PY" -c 'import torch
n = torch.cuda.device_count() if torch.cuda.is_available() else 0
print("%s, built with CUDA %s, torch.cuda.is_available() = %s%s" % (torch.__version__,
      torch.version.cuda, torch.cuda.is_available(),
      "".join(", %s" % torch.cuda.get_device_name(i) for i in range(n))))' 2>&1 | tail -1)"
} >>"$WORK/machine.txt"
log "machine: $(tr '\n' ' ' <"$WORK/machine.txt" | cut -c1-400)"

# ---- configure and build -------------------------------------------------------------------------
CONFIG_ARGS=(-DHVD_BUILD_CONTROL_PLANE=OFF -DCMAKE_BUILD_TYPE=Release
             -DCMAKE_CUDA_ARCHITECTURES="$ARCH" -DHVD_TEST_PYTHON="$(command -v "$PY")")
[ -n "$NCCL_INC" ] && CONFIG_ARGS+=(-DHVD_NCCL_INCLUDE_DIR="$NCCL_INC")
# GoogleTest from source where the machine has no package (the GPU machines have none): a copy of
# Debian's /usr/src/googletest carried as .gtest-src (docs/gpu.md), or HVD_GTEST_SOURCE.
GTEST_SRC="${HVD_GTEST_SOURCE:-$SRC/.gtest-src}"
if [ -f "$GTEST_SRC/CMakeLists.txt" ]; then
  CONFIG_ARGS+=(-DHVD_GTEST_SOURCE_DIR="$GTEST_SRC")
  log "GoogleTest from source: $GTEST_SRC"
fi
[ -x /usr/local/cuda/bin/nvcc ] && CONFIG_ARGS+=(-DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc)
if [ "$REUSE" = 1 ] && [ -f "$BUILD/CMakeCache.txt" ]; then
  # Its cache as it is; regenerated all the same, so that the targets listed below are today's.
  step "configure (reusing $BUILD)" 150 330 "$WORK/configure.log" cmake -S "$SRC" -B "$BUILD"
else
  if ! step configure 150 330 "$WORK/configure.log" \
      cmake -S "$SRC" -B "$BUILD" -G Ninja "${CONFIG_ARGS[@]}"; then
    if grep -q -i 'gtest' "$WORK/configure.log"; then
      # No GoogleTest on this machine: the Python tests and the bench still tell a lot.
      step "configure without C++ tests (no GoogleTest)" 120 300 "$WORK/configure2.log" \
        cmake -S "$SRC" -B "$BUILD" -G Ninja "${CONFIG_ARGS[@]}" -DHVD_BUILD_TESTS=OFF
    fi
  fi
fi

# The targets: libhvd, the plugin, the Python package, and every target named for the GPU (the GPU
# tests and bench); everything when they cannot be listed.
TARGETS=()
if [ -f "$BUILD/build.ninja" ]; then
  while read -r t; do TARGETS+=("$t"); done < <(
    ninja -C "$BUILD" -t targets all 2>/dev/null | sed -n 's/^\([A-Za-z0-9_.+-]*\): phony$/\1/p' |
      grep -E '^(hvd|hvd_cuda|hvd_python)$|gpu|cuda|nccl|device' | grep -v -E '^cmake_|[.]so' |
      sort -u)
fi
if [ ${#TARGETS[@]} -eq 0 ]; then TARGETS=(all); fi
echo "${TARGETS[*]}" >"$WORK/targets.txt"
# -k 0: a target that fails to build costs its own tests only; the report names it.
step "build (${#TARGETS[@]} targets)" 360 170 "$WORK/build.log" \
  cmake --build "$BUILD" -j "$JOBS" --target "${TARGETS[@]}" -- -k 0

# The Python package finds the plugin beside its libhvd.so; where the build did not put it there,
# point the runtime (and hvd.cuda_built()) at the one built.
PLUGIN=$(find "$BUILD/runtime" -maxdepth 3 -name 'libhvd_cuda.so*' -type f 2>/dev/null | head -1)
if [ -n "$PLUGIN" ] && [ ! -e "$BUILD/python/hvd/libhvd_cuda.so" ]; then
  export HVD_CUDA_PLUGIN=$PLUGIN
fi
echo "CUDA plugin: ${PLUGIN:-not built}${HVD_CUDA_PLUGIN:+ (HVD_CUDA_PLUGIN=$HVD_CUDA_PLUGIN)}" \
  >>"$WORK/machine.txt"

# ---- tests ---------------------------------------------------------------------------------------
RESULTS=$WORK/results.txt   # "name: outcome (reason)" per test
: >"$RESULTS"
# python_torch_cuda is run below directly, with its per-test lines. A JUnit file (ctest 3.21 and
# later) gives each test's output; older ctest: the summary lines of its log.
JUNIT=
ctest_version=$(ctest --version | head -1 | grep -o '[0-9][0-9.]*')
if printf '3.21\n%s\n' "$ctest_version" | sort -V -C; then JUNIT="--output-junit '$WORK/ctest.xml'"; fi
step "ctest -L gpu" 200 130 "$WORK/ctest.log" \
  bash -c "cd '$BUILD' && ctest -L gpu -E '^python_torch_cuda\$' --output-on-failure --timeout 120 \
    $JUNIT"
if grep -q 'No tests were found' "$WORK/ctest.log"; then
  # Nothing labelled gpu was built (or registered): nothing checked, which is not a pass.
  STEPS+=("ctest -L gpu: no tests|failed|0|no ctest test labelled gpu besides python_torch_cuda|"\
"$WORK/ctest.log")
  FAILED=1
fi
"$PY" - "$WORK/ctest.xml" "$WORK/ctest.log" >>"$RESULTS" 2>"$WORK/junit.err" <<'EOF'
# One line per ctest test from its JUnit file: passed, failed or skipped with the reason (a
# GoogleTest that ran GTEST_SKIP shows as passed to ctest: it is reported skipped here).
import re, sys, xml.etree.ElementTree as ET
try:
    cases = ET.parse(sys.argv[1]).getroot().iter("testcase")
except Exception:
    # No JUnit file (older ctest): the summary lines of the log.
    for line in open(sys.argv[2], errors="replace"):
        m = re.match(r"\s*\d+/\d+ Test\s+#\d+: (\S+) \.+\**\s*(Passed|Failed|Skipped|Not Run|"
                     r"Timeout|Exception|\w+)", line)
        if m:
            word = m.group(2).lower()
            print("%s: %s" % (m.group(1), word if word in ("passed", "skipped") else
                              "failed (%s)" % word))
    sys.exit(0)


def skip_reason(out):
    """GTEST_SKIP's message (the line after "file:line: Skipped"), else the first line that
    speaks of a skip."""
    m = re.search(r": Skipped\n(.+)", out)
    if m and not m.group(1).startswith("["):
        return m.group(1).strip()
    lines = [l.strip() for l in out.splitlines() if "skip" in l.lower()]
    return lines[0] if lines else ""


for c in cases:
    name = c.get("name")
    out = "".join(e.text or "" for e in c.iter("system-out"))
    status = c.get("status", "")
    if c.find("skipped") is not None or status in ("notrun", "disabled"):
        # The test's own words (ctest's message is only "SKIP_RETURN_CODE=77" or the like).
        message = c.find("skipped").get("message") if c.find("skipped") is not None else ""
        reason = skip_reason(out) or message or status
        print("%s: skipped (%s)" % (name, reason[:300]))
    elif c.find("failure") is not None or c.find("error") is not None or status == "fail":
        lines = out.splitlines()
        at = [i for i, l in enumerate(lines) if "Failure" in l or "error" in l.lower()]
        # GoogleTest: "file:line: Failure" then what was expected and what came.
        why = " / ".join(l.strip() for l in lines[at[0]:at[0] + 4] if l.strip()) if at else ""
        print("%s: failed (%s)" % (name, (why or "see the log")[:400]))
    elif "[  SKIPPED ]" in out:
        print("%s: skipped (%s)" % (name, (skip_reason(out) or "GTEST_SKIP")[:300]))
    else:
        print("%s: passed" % name)
EOF
# Each job of the CUDA tests gets 90 s: a job that hangs leaves time for the others.
step "python GPU tests" 240 60 "$WORK/python.log" \
  env PYTHONPATH="$BUILD/python" PYTHONDONTWRITEBYTECODE=1 HVD_TEST_CUDA_JOB_TIMEOUT=90 \
  "$PY" "$SRC/tests/python/run_gpu_tests.py" --summary "$WORK/python-results.txt"
[ -f "$WORK/python-results.txt" ] && cat "$WORK/python-results.txt" >>"$RESULTS"

# ---- the GPU bench -------------------------------------------------------------------------------
: >"$WORK/bench.md"
BENCHES=$(find "$BUILD/bench" -maxdepth 2 -type f -perm -u+x \( -iname '*gpu*' -o -iname '*cuda*' \
  -o -iname '*nccl*' \) 2>/dev/null | sort)
if [ -z "$BENCHES" ]; then
  STEPS+=("GPU bench|not built|0|no executable under $BUILD/bench named for the GPU")
  FAILED=1
fi
for b in $BENCHES; do
  step "bench $(basename "$b")" 120 5 "$WORK/bench-$(basename "$b").log" "$b"
  { echo "### $(basename "$b")"; echo; cat "$WORK/bench-$(basename "$b").log"; echo; } \
    >>"$WORK/bench.md"
done

# ---- the report ----------------------------------------------------------------------------------
PASSED=$(grep -c ': passed' "$RESULTS")
FAILS=$(grep -c ': failed' "$RESULTS")
SKIPS=$(grep -c ': skipped' "$RESULTS")
[ "$FAILS" -gt 0 ] && FAILED=1
[ "$PASSED" -eq 0 ] && FAILED=1
# All of hvd.torch's CUDA tests skipped (no usable GPU, no plugin): nothing end to end was checked.
printf '%s\n' "${STEPS[@]}" | grep -q '^python GPU tests|ok|' || FAILED=1
TOTAL=$(($(date +%s) - START))
if [ "$FAILED" = 0 ]; then VERDICT="PASSED"; else VERDICT="NOT PASSED"; fi
{
  echo "# hvd GPU check: $VERDICT"
  echo
  echo "$PASSED passed, $FAILS failed, $SKIPS skipped;" \
       "total wall time ${TOTAL} s (budget ${BUDGET} s)."
  echo
  echo "## Machine"
  echo
  sed 's/^/- /' "$WORK/machine.txt"
  echo
  echo "## Steps"
  echo
  echo "| step | result | seconds | note |"
  echo "|---|---|---|---|"
  for s in "${STEPS[@]}"; do
    IFS='|' read -r n st sec note logf <<<"$s"
    echo "| $n | $st | $sec | ${note//|/\\|} |"
  done
  echo
  echo "## Tests"
  echo
  if [ -s "$RESULTS" ]; then sed 's/^/- /' "$RESULTS"; else echo "(no test ran)"; fi
  echo
  echo "## GPU bench"
  echo
  if [ -s "$WORK/bench.md" ]; then cat "$WORK/bench.md"; else echo "(no GPU bench ran)"; fi
  echo
  for s in "${STEPS[@]}"; do
    IFS='|' read -r n st sec note logf <<<"$s"
    case "$st" in failed|"timed out") ;; *) continue ;; esac
    echo "## $n: last lines of its log"
    echo
    tail_of "$logf" 60
    echo
  done
} >"$REPORT"
log "report: $REPORT ($VERDICT; ${TOTAL}s)"
exit "$FAILED"
