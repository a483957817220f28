#!/usr/bin/python3
"""Recovery time of an elastic job after kill -9 of one worker, hvd against torchrun, in
interleaved rounds on this host (docs/reliability.md, "Elastic recovery").

  hvd       hvdrun -np 4 --min-np 2, tests/cli/elastic_program.py (hvd.elastic.run, TorchState):
            worker 3 kills itself at step 5; the three others restore the last commit and re-form
            in place. Recovery: from the kill to the last survivor's first completed allreduce
            in the new generation.
  torchrun  torchrun --nnodes 1:2 (or --torchrun-nnodes 1) --nproc_per_node 4 --max_restarts 3
            (c10d rendezvous),
            torchrun_worker.py: local rank 3 kills itself at step 5; torchrun restarts all four
            workers. Recovery: from the kill to the last worker's first allreduce after the
            restart.

Times are wall clock (time.time()) printed by the processes themselves, all on this host.
Prints each round and the median and worst of each; needs Debian's /usr/bin/python3 with torch,
and build/ (hvdrun, build/python).

  /usr/bin/python3 bench/elastic/recovery.py [--rounds 20] [--build build]
"""
import argparse
import os
import re
import socket
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(cmd, env, timeout):
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       timeout=timeout, text=True)
    return p.returncode, p.stdout


def recovery(out, first_pattern):
    died = [float(m) for m in re.findall(r"dies at step \d+ at ([0-9.]+)", out)]
    firsts = [float(m) for m in re.findall(first_pattern, out)]
    if len(died) != 1 or not firsts:
        return None
    return max(firsts) - died[0]


def hvd_round(build, timeout):
    env = dict(os.environ, PYTHONPATH=os.path.join(build, "python"))
    env.pop("HVD_LAUNCHER", None)
    cmd = [os.path.join(build, "cli", "hvdrun"), "-np", "4", "--min-np", "2", "/usr/bin/python3",
           os.path.join(ROOT, "tests", "cli", "elastic_program.py"), "--steps", "20",
           "--die-worker", "3", "--die-at-step", "5"]
    rc, out = run(cmd, env, timeout)
    r = recovery(out, r"first allreduce after reset at ([0-9.]+)")
    return (r if rc == 0 else None), out


def torchrun_round(timeout, nnodes):
    # torch 1.13's spellings (underscores).
    cmd = ["/usr/bin/torchrun", "--nnodes", nnodes, "--nproc_per_node", "4", "--max_restarts",
           "3", "--rdzv_backend", "c10d", "--rdzv_endpoint", "127.0.0.1:%d" % free_port(),
           "--monitor_interval", "0.1",
           # Debian's torchrun on Python 3.11 crashes parsing the default --redirects/--tee "0"
           # (bench/peers/compare.py); "1" (stdout only) parses and is what this needs.
           "--redirects", "1", "--tee", "1", os.path.join(HERE, "torchrun_worker.py"), "--steps",
           "20", "--die-rank", "3", "--die-at-step", "5"]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    rc, out = run(cmd, env, timeout)
    r = recovery(out, r"first allreduce after restart at ([0-9.]+)")
    return (r if rc == 0 else None), out


def summary(name, xs):
    ok = [x for x in xs if x is not None]
    if not ok:
        return "%-9s no successful round" % name
    return "%-9s median %7.1f ms  worst %7.1f ms  best %7.1f ms  (%d of %d rounds)" % (
        name, statistics.median(ok) * 1e3, max(ok) * 1e3, min(ok) * 1e3, len(ok), len(xs))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--timeout", type=float, default=120, help="seconds per run")
    ap.add_argument("--no-torchrun", action="store_true", help="hvd only")
    ap.add_argument("--torchrun-nnodes", default="1:2",
                    help="torchrun's --nnodes: 1:2 (elastic; its c10d rendezvous then waits "
                         "its last-call timeout, 30 s, for a second node on every restart) or 1")
    a = ap.parse_args()
    if a.rounds < 1:
        ap.error("--rounds must be at least 1")
    if not os.path.exists(os.path.join(a.build, "cli", "hvdrun")):
        ap.error("no %s/cli/hvdrun: build first (./scripts/build.sh)" % a.build)
    print("machine: %d CPUs, %s" % (os.cpu_count(), " ".join(os.uname()[2:3])), flush=True)
    hvd, tr = [], []
    for i in range(a.rounds):
        r, out = hvd_round(a.build, a.timeout)
        hvd.append(r)
        line = "round %2d  hvd %s" % (i + 1, "%.1f ms" % (r * 1e3) if r is not None else "FAILED")
        if r is None:
            print(out[-2000:], file=sys.stderr)
        if not a.no_torchrun:
            r, out = torchrun_round(a.timeout, a.torchrun_nnodes)
            tr.append(r)
            line += "   torchrun %s" % ("%.1f ms" % (r * 1e3) if r is not None else "FAILED")
            if r is None:
                print(out[-2000:], file=sys.stderr)
        print(line, flush=True)
    print(summary("hvd", hvd))
    if not a.no_torchrun:
        print(summary("torchrun", tr))
        ok_h = [x for x in hvd if x is not None]
        ok_t = [x for x in tr if x is not None]
        if ok_h and ok_t:
            print("torchrun / hvd (medians): %.1fx" % (statistics.median(ok_t) /
                                                       statistics.median(ok_h)))
    goal = [x for x in hvd if x is not None]
    met = len(goal) == len(hvd) and statistics.median(goal) < 1.0
    print("goal (hvd median under 1 s, every round recovered): %s" % ("met" if met else "MISSED"))
    return 0 if all(x is not None for x in hvd) else 1


if __name__ == "__main__":
    sys.exit(main())
