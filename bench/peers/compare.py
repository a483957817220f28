#!/usr/bin/env python3
"""compare.py: hvd's allreduce side by side with Open MPI, Gloo and PyTorch, in one run.

Runs (after bench/peers/run.sh has installed the peers and built everything):
  hvd-shm     allreduce_bench --transport shm   hvd's collectives over shared memory
  hvd-tcp     allreduce_bench --transport tcp   hvd's collectives over TCP on 127.0.0.1
  hvd-api     allreduce_bench --api 1           hvd::Allreduce: negotiation, cache, fusion, engine
  hvd-api-ring  the same without the single copy  HVD_SINGLE_COPY_MIN_BYTES=0: the ring above 64 KiB
  hvd-api-tcp   the same over TCP only            HVD_SHM=0: what operations pay between hosts
  hvd-api-oop   the same into an output of its own  --out-of-place 1: what hvd.torch.allreduce runs
  hvd-torch   torch_allreduce.py --backend hvd  hvd.torch.allreduce from Python (out of place)
  mpi-shm     mpirun ... --mca btl self,vader   Open MPI's MPI_Allreduce over shared memory
  mpi-tcp     mpirun ... --mca btl self,tcp     Open MPI's MPI_Allreduce over TCP on lo
  gloo        gloo_allreduce                    Gloo's AllreduceRingChunked over TCP
  torch-gloo  torch_allreduce.py                torch.distributed.all_reduce, gloo backend
  memref      allreduce_bench -np 1             memcpy and a 2-thread a += b on the same size
on the same sizes and rank counts, every program timed and checked by the same method
(bench/allreduce_loop.h; the torch script mirrors it). Each round runs every program once per
size, the sizes one after the other and the programs' order rotated, so that drift on a shared
machine hits the programs compared at a size alike; tables show medians over the rounds. Then the
launch time (hvdrun, mpirun, torchrun to every rank's first allreduce, then exit) and the fusion
benchmark; then the targets of issues 6 and 17, each with its measured ratio.

  bench/peers/compare.py [--rounds 3] [--np 2,4] [--sizes 4K,64K,1M,16M,64M,256M]
                         [--impls hvd-shm,...] [--launch-runs 10] [--fusion-rounds 3]
"""
import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time

# Siblings; torch_allreduce imports torch only for its ranks.
from targets import human, print_targets
from torch_allreduce import parse_bytes

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.join(ROOT, "build")  # --build-dir changes it
PYTHON = "/usr/bin/python3"  # Debian's python3-torch lives there, not in a pyenv python3
IMPLS = ["hvd-shm", "hvd-tcp", "hvd-api", "hvd-api-ring", "hvd-api-tcp", "hvd-api-oop",
         "hvd-torch", "mpi-shm", "mpi-tcp", "gloo", "torch-gloo"]
RUN_TIMEOUT_S = 900  # one program at one size; a hang ends as a failure (--run-timeout)
KILL_GRACE_S = 5     # SIGTERM first (mpirun tears its job down), then SIGKILL
_running = None      # the child now running, killed with its session on SIGTERM/SIGINT
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
          "--mca", "pml", "ob1", "--mca", "oob_tcp_if_include", "lo"]
MPI_BTL = {"mpi-shm": ["--mca", "btl", "self,vader"],
           "mpi-tcp": ["--mca", "btl", "self,tcp", "--mca", "btl_tcp_if_include", "lo"]}
RESULT = re.compile(r"^RESULT (.*)$", re.M)


def binary(*parts):
    return os.path.join(BUILD, *parts)


def command(impl, np_, sizes):
    """The argv (and extra environment) that runs `impl` on `np_` ranks over `sizes`."""
    loop = ["--sizes", sizes, "--results", "1"]
    bench = binary("bench", "allreduce_bench")
    if impl == "hvd-shm":
        return [bench, "-np", str(np_), "--transport", "shm", "--ref", "0"] + loop, {}
    if impl == "hvd-tcp":
        return [bench, "-np", str(np_), "--transport", "tcp", "--ref", "0"] + loop, {}
    if impl == "hvd-api":
        # A job on one host: the runtime picks shared memory itself (HVD_SHM's default).
        return [bench, "-np", str(np_), "--api", "1", "--ref", "0"] + loop, {}
    if impl == "hvd-api-ring":
        return ([bench, "-np", str(np_), "--api", "1", "--ref", "0"] + loop,
                {"HVD_SINGLE_COPY_MIN_BYTES": "0"})
    if impl == "hvd-api-tcp":
        # The API over TCP only: what every operation pays between hosts.
        return ([bench, "-np", str(np_), "--api", "1", "--ref", "0"] + loop, {"HVD_SHM": "0"})
    if impl == "hvd-api-oop":
        return ([bench, "-np", str(np_), "--api", "1", "--out-of-place", "1", "--ref", "0"] + loop,
                {})
    if impl == "memref":
        return [bench, "-np", "1", "--iters", "1", "--warmup", "0"] + loop, {}
    if impl in MPI_BTL:
        return (MPIRUN + MPI_BTL[impl] + ["-np", str(np_), binary("bench", "peers", "mpi_allreduce"),
                                          "--impl", impl] + loop, {})
    if impl == "gloo":
        return [binary("bench", "peers", "gloo_allreduce"), "-np", str(np_)] + loop, {}
    if impl in ("torch-gloo", "hvd-torch"):
        backend = "gloo" if impl == "torch-gloo" else "hvd"
        env = {"OMP_NUM_THREADS": "1"}
        if impl == "hvd-torch":
            env["PYTHONPATH"] = os.pathsep.join(
                [binary("python")] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                                      if p])
        return [PYTHON, os.path.join(ROOT, "bench", "peers", "torch_allreduce.py"),
                "-np", str(np_), "--backend", backend] + loop, env
    raise ValueError(impl)


def kill_session(p):
    """Ends `p`'s session: SIGTERM first, so that mpirun stops its ranks (which it puts in
    process groups of their own), then SIGKILL to whatever is left in the session."""
    def members():
        out = subprocess.run(["ps", "-eo", "pid=,sid="], capture_output=True, text=True).stdout
        return [int(a) for a, b in (l.split() for l in out.splitlines()) if int(b) == p.pid]
    for sig, wait in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, 0)):
        for pid in members():
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait
        while members() and time.monotonic() < deadline:
            time.sleep(0.1)


def run(argv, extra_env, timeout=None):
    """Runs argv in a session of its own; on timeout kills that whole session (ranks included)."""
    global _running
    timeout = timeout or RUN_TIMEOUT_S
    env = dict(os.environ, **extra_env)
    p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    _running = p
    try:
        out, errout = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_session(p)
        p.communicate()
        return None, f"timed out after {timeout} s (killed): {' '.join(argv)}"
    finally:
        _running = None
    if p.returncode != 0:
        tail = "\n".join((errout or out).strip().splitlines()[-3:])
        return out, f"exit {p.returncode}: {' '.join(argv[:3])}...: {tail}"
    return out, None


def parse_results(text):
    rows = []
    for m in RESULT.finditer(text or ""):
        fields = dict(kv.split("=", 1) for kv in m.group(1).split())
        rows.append(fields)
    return rows


class Results:
    def __init__(self):
        self.us = {}     # (impl, np, bytes) -> {round: us per op}
        self.ref = {}    # bytes -> {"memcpy": {round: GB/s}, "reduce2t": {round: GB/s}}
        self.wrong = {}  # (impl, np) -> wrong elements seen
        self.errors = []

    def add(self, impl, np_, rnd, text):
        for f in parse_results(text):
            b = int(f["bytes"])
            if impl == "memref":
                r = self.ref.setdefault(b, {"memcpy": {}, "reduce2t": {}})
                r["memcpy"][rnd] = float(f["memcpy_gbs"])
                r["reduce2t"][rnd] = float(f["reduce2t_gbs"])
                continue
            self.us.setdefault((impl, np_, b), {})[rnd] = float(f["us"])
            if int(f["wrong"]) > 0:  # -1: not checked
                self.wrong[(impl, np_)] = self.wrong.get((impl, np_), 0) + int(f["wrong"])

    def median_us(self, impl, np_, b):
        v = self.us.get((impl, np_, b))
        return statistics.median(v.values()) if v else None

    def round_ratios(self, a, p, np_, b):
        """Peer's time / hvd's time in each round both ran: pairs measured minutes apart."""
        va, vp = self.us.get((a, np_, b), {}), self.us.get((p, np_, b), {})
        return [vp[r] / va[r] for r in sorted(va) if r in vp]

    def busbw(self, impl, np_, b):
        us = self.median_us(impl, np_, b)
        return b / (us * 1e-6) / 1e9 * 2 * (np_ - 1) / np_ if us else None

    def ref_gbs(self, b, which):
        r = self.ref.get(b)
        return statistics.median(r[which].values()) if r and r[which] else None

    def round_ref_ratios(self, impl, np_, b, which):
        """impl's busbw / the reference's GB/s, in each round both ran."""
        va, vr = self.us.get((impl, np_, b), {}), self.ref.get(b, {}).get(which, {})
        f = 2 * (np_ - 1) / np_
        return [b / (va[r] * 1e-6) / 1e9 * f / vr[r] for r in sorted(va) if r in vr and vr[r]]


def versions():
    """The peers' versions, as their own tools report them."""
    def ask(argv):
        try:
            r = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return r.stdout.strip() if r.returncode == 0 else None
    mpi = re.search(r"v([0-9][0-9.]*)", ask(["ompi_info", "--version"]) or "")
    torch = ask([PYTHON, "-c", "import torch; print(torch.__version__)"])
    gloo = ask(["dpkg-query", "-W", "-f=${Version}", "libgloo-dev"])
    return (f"Open MPI {mpi.group(1) if mpi else '(none)'}, PyTorch {torch or '(none)'}, "
            f"Gloo (libgloo-dev) {gloo or '(none)'}")


def available(impl):
    need = {"mpi-shm": binary("bench", "peers", "mpi_allreduce"),
            "mpi-tcp": binary("bench", "peers", "mpi_allreduce"),
            "gloo": binary("bench", "peers", "gloo_allreduce"),
            "torch-gloo": PYTHON, "hvd-torch": PYTHON}
    path = need.get(impl, binary("bench", "allreduce_bench"))
    if not os.access(path, os.X_OK):
        return f"{path} is missing (run bench/peers/run.sh, which installs the peers and builds)"
    if impl in ("torch-gloo", "hvd-torch"):
        r = subprocess.run([PYTHON, "-c", "import torch.distributed"], capture_output=True)
        if r.returncode != 0:
            return "python3-torch is not installed (bench/peers/run.sh installs it)"
    if impl == "hvd-torch" and not os.path.isfile(binary("python", "hvd", "torch", "__init__.py")):
        return f"{binary('python', 'hvd')} is missing (the build makes hvd's Python package there)"
    return None


def bench_allreduce(args, impls, results):
    """Every program once per size per round, one size at a time: the machine's slow spells
    (seconds to minutes on a shared VM) then hit the programs compared at a size alike."""
    jobs = [("memref", 1)] + [(i, n) for n in args.np for i in impls]
    for r in range(args.rounds):
        t_round = time.monotonic()
        for b in args.sizes:
            # Rotate the order by round and size: no program always runs first or last.
            k = (r * 3 + args.sizes.index(b)) % len(jobs)
            for impl, np_ in jobs[k:] + jobs[:k]:
                argv, env = command(impl, np_, human(b))
                out, err = run(argv, env)
                if err:
                    print(f"# round {r + 1}: {impl} np={np_} {human(b)}: FAILED: {err}", flush=True)
                    results.errors.append(f"round {r + 1} {impl} np={np_} {human(b)}: {err}")
                results.add(impl, np_, r, out)
        print(f"# round {r + 1}/{args.rounds} done in {time.monotonic() - t_round:.0f} s "
              f"(load average {os.getloadavg()[0]:.1f})", flush=True)


def print_tables(args, impls, res):
    for np_ in args.np:
        print(f"\n## {np_} ranks: median time per op (us) | bus bandwidth (GB/s), float32 sum, "
              f"{args.rounds} interleaved rounds")
        head = f"{'size':>6} " + " ".join(f"{i:>17}" for i in impls) + f" {'memcpy':>7} {'red2t':>7}"
        print(head)
        for b in args.sizes:
            cells = []
            for i in impls:
                us, bw = res.median_us(i, np_, b), res.busbw(i, np_, b)
                cells.append(f"{us:9.1f} |{bw:6.2f}" if us else f"{'-':>17}")
            mc, rd = res.ref_gbs(b, "memcpy"), res.ref_gbs(b, "reduce2t")
            print(f"{human(b):>6} " + " ".join(f"{c:>17}" for c in cells) +
                  f" {mc or 0:7.2f} {rd or 0:7.2f}")
        pairs = [(a, p) for a, p in [("hvd-shm", "mpi-shm"), ("hvd-shm", "gloo"),
                                     ("hvd-shm", "torch-gloo"), ("hvd-tcp", "mpi-tcp"),
                                     ("hvd-tcp", "gloo"), ("hvd-api", "mpi-shm"),
                                     ("hvd-torch", "torch-gloo"),
                                     ("hvd-api-ring", "mpi-shm"), ("hvd-api-tcp", "mpi-tcp")]
                 if a in impls and p in impls]
        if pairs:
            print(f"\n## {np_} ranks: speed of hvd / peer (peer's time / hvd's time; > 1: hvd faster)"
                  "; median over rounds, then in [] the worst round's")
            print(f"{'size':>6} " + " ".join(f"{a + '/' + p:>28}" for a, p in pairs))
            for b in args.sizes:
                cells = []
                for a, p in pairs:
                    ua, up = res.median_us(a, np_, b), res.median_us(p, np_, b)
                    worst = min(res.round_ratios(a, p, np_, b), default=None)
                    cells.append(f"{up / ua:17.2f}x [{worst:5.2f}x]" if ua and up and worst
                                 else f"{'-':>28}")
                print(f"{human(b):>6} " + " ".join(cells))


def time_command(argv, env):
    t0 = time.perf_counter()
    out, err = run(argv, env, timeout=120)
    return time.perf_counter() - t0, err


def launch_commands(np_):
    hello = os.path.join(ROOT, "bench", "peers", "torch_allreduce.py")
    return {
        "hvdrun": ([binary("cli", "hvdrun"), "-np", str(np_),
                    binary("bench", "peers", "launch_hello_hvd")], {}),
        "mpirun": (MPIRUN + MPI_BTL["mpi-shm"] +
                   ["-np", str(np_), binary("bench", "peers", "launch_hello_mpi")], {}),
        # Debian's torchrun on Python 3.11 crashes parsing the default --redirects/--tee "0"
        # (its Std enum lost the 0 member); "1" (stdout only) parses.
        "torchrun": (["torchrun", "--nproc_per_node", str(np_), "--redirects", "1", "--tee", "1",
                      hello, "--hello", "1"], {"OMP_NUM_THREADS": "1"}),
    }


def bench_launch(args, res):
    np_ = 4
    cmds = launch_commands(np_)
    names = [n for n in cmds if shutil.which(cmds[n][0][0]) or os.access(cmds[n][0][0], os.X_OK)]
    if not names:
        print("\n## launch: skipped: none of hvdrun, mpirun, torchrun was found")
        return {}
    times = {n: [] for n in names}
    for r in range(args.launch_runs):
        for n in names[r % len(names):] + names[:r % len(names)]:
            t, err = time_command(*cmds[n])
            if err:
                res.errors.append(f"launch {n}: {err}")
            else:
                times[n].append(t)
    print(f"\n## launch: -np {np_} to every rank's first allreduce, then exit "
          f"(median of {args.launch_runs} interleaved runs)")
    for n in names:
        v = times[n]
        print(f"{n:>9}: " + (f"{statistics.median(v) * 1e3:8.1f} ms  (min {min(v) * 1e3:.1f}, "
                              f"max {max(v) * 1e3:.1f})" if v else "failed"))
    return {n: statistics.median(v) for n, v in times.items() if v}


def bench_fusion(args, res):
    argv = [binary("bench", "fusion_bench"), "-np", "2", "--rounds", str(args.fusion_rounds)]
    out, err = run(argv, {})
    print(f"\n## fusion: ResNet-50-shaped step (161 tensors), 2 ranks, full runtime path")
    if err:
        res.errors.append(f"fusion_bench: {err}")
        print("failed")
        return None
    for line in out.splitlines():
        if line.startswith("  fused") or line.startswith("  unfused") or "speedup" in line:
            print(line)
    m = re.search(r"speedup fused/unfused.*?: ([0-9.]+)x", out)
    return float(m.group(1)) if m else None


def main():
    global BUILD, RUN_TIMEOUT_S
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n".join(__doc__.splitlines()[1:]))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--np", default="2,4", help="rank counts, e.g. 2,4")
    p.add_argument("--sizes", default="4K,64K,1M,16M,64M,256M")
    p.add_argument("--impls", default=",".join(IMPLS))
    p.add_argument("--launch-runs", type=int, default=10, help="0: skip the launch timing")
    p.add_argument("--fusion-rounds", type=int, default=3, help="0: skip the fusion benchmark")
    p.add_argument("--build-dir", default=BUILD, help="where scripts/build.sh built hvd")
    p.add_argument("--run-timeout", type=int, default=RUN_TIMEOUT_S,
                   help="seconds one program may run at one size before it is killed")
    args = p.parse_args()
    try:
        args.np = [int(n) for n in args.np.split(",")]
    except ValueError:
        p.error(f"--np: expected rank counts like 2,4, got '{args.np}'")
    try:
        args.sizes = [parse_bytes(s) for s in args.sizes.split(",")]
    except ValueError:
        p.error(f"--sizes: expected positive sizes like 4K,64K,1M (at least 4 bytes), "
                f"got '{args.sizes}'")
    BUILD, RUN_TIMEOUT_S = os.path.abspath(args.build_dir), args.run_timeout
    # A SIGTERM (e.g. a test's timeout) or Ctrl-C must not leave the program now running behind.
    def stop(sig, frame):
        if _running is not None:
            kill_session(_running)
        sys.exit(128 + sig)
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    if any(n < 2 or n > 64 for n in args.np):
        p.error("--np: rank counts must be 2..64 (an allreduce of one rank moves nothing)")
    if args.rounds < 1:
        p.error("--rounds: expected at least 1")
    impls = [i for i in args.impls.split(",") if i]
    unknown = [i for i in impls if i not in IMPLS]
    if unknown:
        p.error(f"--impls: unknown {','.join(unknown)}; choose from {','.join(IMPLS)}")
    missing = {i: available(i) for i in impls}
    for i, why in missing.items():
        if why:
            print(f"# {i}: skipped: {why}")
    impls = [i for i in impls if not missing[i]]
    uname = os.uname()
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                if l.startswith("model name")), "?")
    print(f"# machine: {cpu}, nproc {os.cpu_count()}, {uname.sysname} {uname.release}; "
          f"load average {os.getloadavg()[0]:.1f}")
    print(f"# peers: {versions()}")

    res = Results()
    bench_allreduce(args, impls, res)
    print_tables(args, impls, res)
    launch = bench_launch(args, res) if args.launch_runs > 0 else {}
    fusion = bench_fusion(args, res) if args.fusion_rounds > 0 else None
    print_targets(args, impls, res, launch, fusion)
    print(f"# load average at the end {os.getloadavg()[0]:.1f}")
    bad = {k: v for k, v in res.wrong.items() if v}
    for (impl, np_), n in bad.items():
        print(f"# WRONG RESULTS: {impl} np={np_}: {n} elements")
    for e in res.errors:
        print(f"# error: {e}")
    return 1 if bad or res.errors else 0


if __name__ == "__main__":
    sys.exit(main())
