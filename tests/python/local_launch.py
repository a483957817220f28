"""Starts an N-rank job on this host without hvdrun: each rank is a subprocess with HVD_RANK,
HVD_SIZE and HVD_RENDEZVOUS=file://DIR (a fresh directory: the runtime's file store), the way the
runtime takes them from the environment (runtime/core/context.cc). Local and cross ranks are left
to the runtime (derived from the host name, as under hvdrun). For machines without the control
plane (the GPU check has no gRPC, hence no hvdrun), and for tests that start their own ranks.

    python3 tests/python/local_launch.py -np 2 [--timeout 120] -- python3 train.py ...

prints every rank's output prefixed with "[rank]" and exits 0 when every rank did, else with the
first failing rank's status (124 when the job ran past --timeout). From Python: launch().
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

# A rank that exits non-zero usually leaves the others waiting in a collective: they are ended
# this long after it (the job has failed anyway; the grace lets them print their own error).
FAIL_GRACE_SECONDS = 5.0


_KEPT = ("HVD_LIBRARY", "HVD_CUDA_PLUGIN", "HVD_NCCL_LIBRARY", "HVD_CUDART_LIBRARY")


def rank_env(rank, size, rendezvous_dir, base=None, extra=None):
    """The environment of one rank: `base` (default os.environ) without any HVD_/HOROVOD_
    variable of an enclosing job, plus the rank variables and `extra`."""
    base = os.environ if base is None else base
    env = {k: v for k, v in base.items() if not k.startswith(("HVD_", "HOROVOD_"))}
    # What says which libraries to load, and the tests' own knobs (HVD_TEST_*), are kept.
    for k, v in base.items():
        if k in _KEPT or k.startswith("HVD_TEST_"):
            env[k] = v
    env.update(HVD_RANK=str(rank), HVD_SIZE=str(size),
               HVD_RENDEZVOUS="file://" + rendezvous_dir)
    env.update(extra or {})
    return env


def launch(np, cmd, timeout=120.0, extra_env=None, cwd=None):
    """Runs `cmd` (a list) as ranks 0..np-1 of one job; returns (codes, outputs, timed_out):
    each rank's exit status (None when it had to be killed) and its output (stdout and stderr
    together). Every process started is ended before this returns."""
    with tempfile.TemporaryDirectory(prefix="hvd-rdzv-") as rendezvous:
        procs, files = [], []
        try:
            for rank in range(np):
                out = tempfile.TemporaryFile(mode="w+")
                files.append(out)
                procs.append(subprocess.Popen(cmd, env=rank_env(rank, np, rendezvous,
                                                                extra=extra_env),
                                              stdout=out, stderr=subprocess.STDOUT, cwd=cwd))
            timed_out = _wait(procs, time.monotonic() + timeout)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        codes = [None if timed_out and p.returncode < 0 else p.returncode for p in procs]
        outputs = []
        for f in files:
            f.seek(0)
            outputs.append(f.read())
            f.close()
    return codes, outputs, timed_out


def _wait(procs, deadline):
    """Waits until every process has exited; True when the deadline came first. Once one has
    failed, the others get FAIL_GRACE_SECONDS more."""
    while True:
        codes = [p.poll() for p in procs]
        if all(c is not None for c in codes):
            return False
        now = time.monotonic()
        if now >= deadline:
            return True
        if any(c not in (None, 0) for c in codes):
            deadline = min(deadline, now + FAIL_GRACE_SECONDS)
        time.sleep(0.05)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-np", "--num-proc", type=int, required=True, help="number of ranks")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds for the whole job")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- command and arguments")
    args = parser.parse_args(argv)
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not cmd or args.num_proc < 1:
        parser.error("give -np N (N >= 1) and a command after --")
    codes, outputs, timed_out = launch(args.num_proc, cmd, args.timeout)
    for rank, out in enumerate(outputs):
        for line in out.splitlines():
            print("[%d] %s" % (rank, line))
    if timed_out:
        print("local_launch: the job ran past %.0f s; ranks still running were killed"
              % args.timeout, file=sys.stderr)
        return 124
    return next((c for c in codes if c != 0), 0)


if __name__ == "__main__":
    sys.exit(main())
