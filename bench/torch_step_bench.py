#!/usr/bin/python3
"""torch_step_bench: a PyTorch training step with hvd.torch against PyTorch's
DistributedDataParallel on gloo, side by side, and hvd.allreduce's Python overhead.

    PYTHONPATH=build/python /usr/bin/python3 bench/torch_step_bench.py
        [--np 2,4] [--rounds 3] [--models large,small] [--batch 32] [--seconds 1.0]
        [--parts steps,latency] [--lat-sizes 4K] [--lat-np 2] [--build-dir build]
        [--run-timeout 180]
        [--module hvd.torch]

Training steps: the same MLP, the same synthetic batch (per rank; fixed, so no data loading is
timed) and the same SGD step, run three ways:
  hvd   hvd.DistributedOptimizer(opt, named_parameters=...) after hvd.broadcast_parameters
        (hvd's ranks meet through HVD_RANK/HVD_SIZE/HVD_RENDEZVOUS=file://<tmpdir>);
  ddp   torch.nn.parallel.DistributedDataParallel on torch.distributed's gloo backend
        (MASTER_ADDR=127.0.0.1, MASTER_PORT=a free port, GLOO_SOCKET_IFNAME=lo);
  none  no communication at all, the same ranks side by side (they agree on loop lengths and
        start their timed loops together through files): the compute-only floor; "comm" in the
        table is a step's time above it.
Models: "large" 1024-1536-1024-10 (3.16M float32 parameters: 12.6 MB of gradients per step),
"small" 64-256-256-10 (85k parameters: 340 KB). One intra-op thread per rank.
The script prints which BLAS torch loaded: Debian's python3-torch multiplies with whatever
libblas.so.3 the system selects, the reference (netlib) one unless OpenBLAS is installed
(libopenblas0-openmp), which makes these steps about 10x faster and communication's share larger.
Per run: 5 warmup steps, a probe loop grown x4 until it lasts 0.1 s, then a timed loop sized to
last --seconds (5..2000 steps); time per step = the slowest rank's; samples/s = ranks x batch /
time per step (the job's throughput).

Python overhead: one synchronous hvd.allreduce of 4 KiB (1024 float32, op=hvd.Sum, a fixed name;
--lat-sizes 4K,64M adds other sizes) from Python on 2 ranks (--lat-np 2,4 adds rank counts),
timed as build/bench/allreduce_bench -np 2 --api 1 --sizes 4K --iters 1000 --out-of-place 1
times hvd::Allreduce from C++ into an
output of its own (200 warmup operations, then 1000 timed ones after a barrier; above 64 KiB
about 256 MiB of traffic and at least 10 timed, at most 64 MiB of warmup; the slowest rank's
time), which this script runs and parses. Also reported: hvd.allreduce_ (in place) against the
same C++ loop in place. The warmup matters: the first hundred or so operations after init run up
to 1.7x slower (C++ and Python alike), so 5 warmups made the reference look slower than it is.

Every round runs every configuration once, rotating which implementation goes first, so a slow
spell of the machine hits both alike; the tables are medians over rounds. Each configuration
starts fresh processes, each rank a bench/torch_step_worker.py (every rank in a session of its
own; all are killed and reaped on failure, timeout, SIGTERM or Ctrl-C).

Goals (printed as met/MISSED): hvd >= 1.5x DDP-gloo's samples/s on the large model (>= 10 MB of
gradients) at every rank count, and hvd.allreduce from Python within 2x of C++'s time per op (4
KiB), within 5% from 64 MiB.
Exits non-zero when a run fails (not when a goal is missed).
"""
import argparse
import math
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

from torch_step_worker import MODELS, lat_iters, lat_warmup

PYTHON = "/usr/bin/python3"  # Debian's python3-torch lives there
HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "torch_step_worker.py")  # one rank of a run
ROOT = os.path.dirname(HERE)
GOAL_THROUGHPUT = 1.5  # hvd samples/s over DDP-gloo's, large model
GOAL_OVERHEAD = 2.0    # Python time per 4 KiB allreduce over C++'s
GOAL_OVERHEAD_LARGE = 1.05  # ... per allreduce of 64 MiB and more


def parse_ranks(text):
    """'2' -> 2: a rank count of --lat-np (at least 2)."""
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 2:
        sys.exit(f"torch_step_bench: --lat-np: {text!r} is not a rank count of 2 or more")
    return n


def parse_bytes(text):
    """'4096', '4K', '64M' -> bytes (x1024 suffixes), a multiple of 4 (float32 elements)."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    t = text.strip().upper()
    try:
        n = int(t[:-1]) * units[t[-1]] if t[-1:] in units else int(t)
    except ValueError:
        sys.exit(f"torch_step_bench: --lat-sizes: {text!r} is not a size like 4096, 4K or 64M")
    if n <= 0 or n % 4:
        sys.exit(f"torch_step_bench: --lat-sizes: {text!r} must be a positive multiple of 4 bytes")
    return n


def human(n):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"
MODULE = "hvd.torch"
LAT_RUNS = ["cpp-oop", "py", "cpp"]  # the latency part's runs; a round's order rotates
IMPLS = ["hvd", "ddp", "none"]  # a round's order rotates through these
IMPLS_ORDERED = ["none", "hvd", "ddp"]


# ----------------------------------------------------------------------------- launcher side

_live = []  # Popen objects still to reap, for the signal handler


def _kill(procs):
    for sig in (signal.SIGTERM, signal.SIGKILL):
        alive = [p for p in procs if p.poll() is None]
        for p in alive:
            try:
                os.killpg(p.pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 2
        for p in alive:
            try:
                p.wait(timeout=max(0.01, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
    for p in procs:
        p.wait()  # reaped (SIGKILL cannot be refused)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(kind, np_, worker_argv, timeout):
    """Starts np_ ranks of this script as `kind` (hvd|latency: hvd's env rendezvous; ddp:
    torch.distributed's env://; none: files); returns (RESULT lines, None) or (None, why)."""
    tmp = tempfile.mkdtemp(prefix="torch_step_bench.")
    port = free_port() if kind == "ddp" else None
    procs, outs = [], []
    try:
        for r in range(np_):
            env = dict(os.environ, OMP_NUM_THREADS="1")
            if kind == "none":
                env.update(BENCH_RANK=str(r), BENCH_SIZE=str(np_), BENCH_SYNC_DIR=tmp)
            elif kind == "ddp":
                env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(r),
                           WORLD_SIZE=str(np_), GLOO_SOCKET_IFNAME="lo")
            else:
                env.update(HVD_RANK=str(r), HVD_SIZE=str(np_),
                           HVD_RENDEZVOUS=f"file://{tmp}/rendezvous")
            argv = worker_argv + (["--module", MODULE] if kind in ("hvd", "latency") else [])
            out = open(os.path.join(tmp, f"rank{r}.out"), "w+")
            outs.append(out)
            p = subprocess.Popen([PYTHON, WORKER, kind] + argv,
                                 env=env, stdin=subprocess.DEVNULL, stdout=out,
                                 stderr=subprocess.STDOUT, start_new_session=True)
            procs.append(p)
            _live.append(p)
        deadline = time.monotonic() + timeout
        why = None
        while any(p.poll() is None for p in procs):
            bad = [r for r, p in enumerate(procs) if p.returncode not in (None, 0)]
            if bad:
                why = f"rank {bad[0]} exited with {procs[bad[0]].returncode}"
                break
            if time.monotonic() > deadline:
                why = f"timed out after {timeout} s"
                break
            time.sleep(0.02)
        _kill(procs)
        if why is None:
            bad = [r for r, p in enumerate(procs) if p.returncode != 0]
            if bad:
                why = f"rank {bad[0]} exited with {procs[bad[0]].returncode}"
        texts = []
        for out in outs:
            out.seek(0)
            texts.append(out.read())
        if why:
            failed = [r for r, p in enumerate(procs) if p.returncode not in (0, -signal.SIGTERM,
                                                                             -signal.SIGKILL)]
            text = texts[failed[0] if failed else 0]
            tail = "\n".join(text.splitlines()[-15:])
            return None, f"{kind} -np {np_} {' '.join(worker_argv)}: {why}\n{tail}"
        return [l for l in texts[0].splitlines() if l.startswith("RESULT ")], None
    finally:
        _kill(procs)
        for p in procs:
            if p in _live:
                _live.remove(p)
        for out in outs:
            out.close()
        shutil.rmtree(tmp, ignore_errors=True)


def fields(line):
    return dict(kv.split("=", 1) for kv in line.split()[1:])


def cpp_latency(build, timeout, np_, nbytes, out_of_place):
    argv = [os.path.join(build, "bench", "allreduce_bench"), "-np", str(np_), "--api", "1",
            "--sizes", str(nbytes), "--iters", str(lat_iters(nbytes)),
            "--warmup", str(lat_warmup(nbytes)), "--out-of-place", "1" if out_of_place else "0",
            "--results", "1", "--ref", "0"]
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         start_new_session=True)
    _live.append(p)
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill([p])
        return None, f"{' '.join(argv)}: timed out after {timeout} s"
    finally:
        _kill([p])
        _live.remove(p)
    m = re.search(r"^RESULT .*\bus=([0-9.]+)", out, re.M)
    if p.returncode != 0 or not m:
        return None, f"{' '.join(argv)}: exit {p.returncode}\n{out[-2000:]}"
    return float(m.group(1)), None


def machine():
    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{cpu}, nproc {os.cpu_count()}, Linux {platform.release()} {platform.machine()}"


def blas():
    """The BLAS library torch loaded here (the ranks inherit the environment that chose it)."""
    try:
        with open("/proc/self/maps") as f:
            paths = {l.split()[-1] for l in f if "blas" in l.split()[-1].lower()}
    except OSError:
        return "unknown"
    paths = sorted(os.path.realpath(p) for p in paths)
    if not paths:
        return "none loaded"
    kind = ("OpenBLAS" if any("openblas" in p for p in paths) else
            "reference (netlib) BLAS: slow; Debian's libopenblas0-openmp replaces it"
            if any(p.endswith("/blas/libblas.so.3") or "libblas.so.3." in p for p in paths)
            else "other")
    return f"{kind} ({', '.join(paths)})"


def launcher_main(args):
    import torch  # only its version; the ranks import it themselves

    global MODULE
    MODULE = args.module
    build = os.path.abspath(args.build_dir)
    if os.path.isdir(os.path.join(build, "python")):
        os.environ["PYTHONPATH"] = os.pathsep.join(
            [os.path.join(build, "python")] + [p for p in os.environ.get("PYTHONPATH", "").split(
                os.pathsep) if p])
    parts = set(args.parts.split(","))
    if not parts or parts - {"steps", "latency"}:
        sys.exit(f"torch_step_bench: --parts takes steps, latency or both, not {args.parts!r}")
    nps = [int(n) for n in args.np.split(",")] if "steps" in parts else []
    models = args.models.split(",")
    for m in models:
        if m not in MODELS:
            sys.exit(f"torch_step_bench: unknown model {m!r} (large, small)")
    print(f"# torch_step_bench: hvd.torch DistributedOptimizer vs DistributedDataParallel "
          f"(gloo), PyTorch {torch.__version__}, Python {platform.python_version()}")
    print(f"# machine: {machine()}; load average {os.getloadavg()[0]:.2f} at start")
    print(f"# BLAS: {blas()}")
    print(f"# {args.rounds} rounds, ranks {nps}, batch {args.batch} per rank, one intra-op thread "
          f"per rank; medians over rounds")
    step = {}  # (np, model, impl) -> {round: step_ms}
    lat = {}   # (impl, ranks, bytes) -> {round: us}
    lat_sizes = [parse_bytes(x) for x in args.lat_sizes.split(",")]
    lat_nps = [parse_ranks(x) for x in args.lat_np.split(",")]
    failed = []

    def fail(why):
        failed.append(why)
        print(f"# FAILED: {why}", file=sys.stderr, flush=True)

    t_start = time.time()
    for rnd in range(args.rounds):
        for np_ in nps:
            for model in models:
                impls = IMPLS[rnd % len(IMPLS):] + IMPLS[:rnd % len(IMPLS)]
                for impl in impls:
                    wargs = ["--model", model, "--batch", str(args.batch),
                             "--seconds", str(args.seconds)]
                    res, why = launch(impl, np_, wargs, args.run_timeout)
                    if not why and not res:
                        why = f"{impl} -np {np_}: no RESULT line"
                    if why:
                        fail(why)
                        continue
                    f = fields(res[0])
                    ms = float(f["step_ms"])
                    step.setdefault((np_, model, impl), {})[rnd] = ms
                    print(f"# round {rnd + 1}: {impl:4s} np={np_} {model:5s} {ms:9.2f} ms/step "
                          f"{np_ * args.batch / ms * 1e3:10.1f} samples/s ({f['steps']} steps)",
                          flush=True)
        order = (LAT_RUNS[rnd % 3:] + LAT_RUNS[:rnd % 3]) if "latency" in parts else []
        for np_, nbytes in [(n, b) for n in lat_nps for b in lat_sizes] if order else []:
            for which in order:
                if which != "py":
                    us, why = cpp_latency(build, args.run_timeout, np_, nbytes,
                                          which == "cpp-oop")
                    if why:
                        fail(why)
                        continue
                    lat.setdefault((which, np_, nbytes), {})[rnd] = us
                else:
                    res, why = launch("latency", np_, ["--lat-bytes", str(nbytes)],
                                      args.run_timeout)
                    if why:
                        fail(why)
                        continue
                    for line in res:
                        f = fields(line)
                        lat.setdefault((f["impl"], np_, nbytes), {})[rnd] = float(f["us"])
            print(f"# round {rnd + 1}: {human(nbytes)} allreduce on {np_} ranks, us/op: " +
                  ", ".join(f"{k} {v[rnd]:.2f}" for (k, n, b), v in sorted(lat.items())
                            if (n, b) == (np_, nbytes) and rnd in v), flush=True)

    nan = float("nan")
    med = lambda xs: statistics.median(xs) if xs else nan

    def ratio(num, den):
        """The median over rounds of num/den measured in the same round (a slow spell then hits
        both alike)."""
        return med([num[r] / den[r] for r in num if r in den])

    def verdict(ok, measured):
        return "not measured" if not measured else "met" if ok else "MISSED"

    print(f"\n# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(t_start))}, "
          f"{time.time() - t_start:.0f} s; load average {os.getloadavg()[0]:.2f} at the end")
    goal_ratios = []
    if nps:
        print("# training step: median time per step (ms) over rounds; samples/s = ranks x batch "
              "/ that time; hvd/ddp: median over rounds of the same round's samples/s ratio")
        print("# none: the same step with no communication (the ranks side by side), what neither "
              "can beat; comm = step - none")
        print(f"{'ranks':>5} {'model':>6} {'grad MB':>7} {'none ms':>8} {'hvd ms':>8} "
              f"{'ddp ms':>8} {'hvd comm':>8} {'ddp comm':>8} {'hvd smp/s':>10} {'ddp smp/s':>10} "
              f"{'hvd/ddp':>8}")
    for np_ in nps:
        for model in models:
            runs = {i: step.get((np_, model, i), {}) for i in IMPLS}
            none, h, d = (med(list(runs[i].values())) for i in IMPLS_ORDERED)
            dims = MODELS[model]
            mb = sum(dims[i] * dims[i + 1] + dims[i + 1] for i in range(len(dims) - 1)) * 4 / 1e6
            r = ratio(runs["ddp"], runs["hvd"])  # samples/s hvd over ddp: ddp's time over hvd's
            if mb >= 10:
                goal_ratios.append((np_, r))
            rate = lambda ms: np_ * args.batch / ms * 1e3
            print(f"{np_:>5} {model:>6} {mb:7.2f} {none:8.2f} {h:8.2f} {d:8.2f} {h - none:8.2f} "
                  f"{d - none:8.2f} {rate(h):10.1f} {rate(d):10.1f} {r:7.2f}x")
    overhead = {}  # (ranks, bytes) -> hvd.allreduce's time over C++'s
    for np_, nbytes in [(n, b) for n in lat_nps for b in lat_sizes] if "latency" in parts else []:
        print(f"# {human(nbytes)} synchronous allreduce on {np_} ranks: median us/op over rounds; "
              "x C++: median over rounds of the same round's ratio to the C++ call doing the same "
              "work (cpp-oop: out of place, into an output allocated once, as hvd.allreduce; cpp: "
              "in place, as hvd.allreduce_)")
        for k, ref in (("cpp-oop", None), ("cpp", None), ("py-allreduce", "cpp-oop"),
                       ("py-allreduce_", "cpp")):
            v = lat.get((k, np_, nbytes), {})
            print(f"  {k:15s} {med(list(v.values())):9.2f} us" +
                  (f"   {ratio(v, lat.get((ref, np_, nbytes), {})):.2f}x {ref}" if ref else ""))
        overhead[np_, nbytes] = ratio(lat.get(("py-allreduce", np_, nbytes), {}),
                                      lat.get(("cpp-oop", np_, nbytes), {}))
    print()
    if goal_ratios:
        measured = all(not math.isnan(r) for _, r in goal_ratios)
        ok = all(r >= GOAL_THROUGHPUT for _, r in goal_ratios)
        print(f"goal hvd >= {GOAL_THROUGHPUT}x DDP-gloo samples/s on >= 10 MB gradients: "
              f"{verdict(ok, measured)} (" + ", ".join(
                  f"{n} ranks {r:.2f}x" for n, r in goal_ratios) + ")")
    for (np_, nbytes), r in overhead.items():
        # Issue 17: small tensors within 2x of C++; from 64 MiB, within 5% (the bytes dominate).
        goal = GOAL_OVERHEAD if nbytes < (64 << 20) else GOAL_OVERHEAD_LARGE
        print(f"goal hvd.allreduce from Python within {goal}x of C++ ({human(nbytes)}, {np_} "
              f"ranks): {verdict(r <= goal, not math.isnan(r))} ({r:.2f}x)")
    if failed:
        print(f"torch_step_bench: {len(failed)} run(s) failed", file=sys.stderr)
        return 1
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--np", default="2,4", help="rank counts, comma-separated")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--models", default="large,small")
    p.add_argument("--lat-sizes", default="4K",
                   help="latency: tensor sizes, comma-separated (e.g. 4K,64M)")
    p.add_argument("--lat-np", default="2",
                   help="latency: rank counts, comma-separated (e.g. 2,4; more ranks than CPUs "
                        "are oversubscribed)")
    p.add_argument("--parts", default="steps,latency",
                   help="what to measure: steps (training steps), latency (4 KiB allreduce)")
    p.add_argument("--batch", type=int, default=32, help="samples per rank per step")
    p.add_argument("--seconds", type=float, default=1.0, help="timed loop length per run")
    p.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    p.add_argument("--run-timeout", type=int, default=180, help="seconds per run")
    p.add_argument("--module", default="hvd.torch",
                   help="the Horovod-API module hvd's ranks import (horovod.torch: hvd's compat "
                        "package, on PYTHONPATH)")
    args = p.parse_args()

    def on_term(signum, frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)
    try:
        return launcher_main(args)
    finally:
        _kill(list(_live))


if __name__ == "__main__":
    sys.exit(main())
