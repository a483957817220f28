#!/usr/bin/env python3
"""Randomized fault injection against a real hvd cluster on 127.0.0.1.

Starts hvd-launcherd and two hvd-agents (node-a, node-b; state dirs; lease 2 s), then runs
trials: a 4-rank job of fault_worker through the real hvdrun, one fault of a random class at a
random moment, and a check afterwards that nothing of the job is left (a /proc scan for this run's
marker) and that nothing hung. Prints the trials, orphans found, hangs, and detection-to-teardown
times (p50/p99 per class and overall).

  tests/faults/chaos.py --build build --trials 100          # the randomized run
  tests/faults/chaos.py --build build --per-class 20         # each class N times (reliability.md)

Detection-to-teardown: from the fault until no process of the job remains and the launcher has
the job in a final state. For a launcher killed and restarted within the lease the job goes on;
its figure is the recovery time instead (restart until every agent is READY again and the job is
still RUNNING). Only 127.0.0.1 is used.
"""
import argparse
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

CLASSES = ["kill_rank", "kill_child", "exit3", "sigstop_rank", "kill_agent", "kill_hvdrun",
           "kill_launcher_restart", "missing_binary"]
TRIAL_BOUND_S = 40


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def proc_environ(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f.read().split(b"\0")
    except OSError:
        return []


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def marked(marker, exclude=(), job=None):
    """Live pids whose environment holds the marker (and the job id, when given)."""
    want = f"HVD_CHAOS_MARKER={marker}".encode()
    job_var = f"HVD_JOB_ID={job}".encode() if job else None
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in exclude or int(name) == os.getpid():
            continue
        env = proc_environ(name)
        if want in env and (job_var is None or job_var in env) and alive(name):
            out.append(int(name))
    return out


class Cluster:
    def __init__(self, build, workdir, lease_ms=2000):
        self.build = build
        self.dir = workdir
        self.lease_ms = lease_ms
        self.marker = f"chaos{os.getpid()}-{random.getrandbits(32):08x}"
        self.token = os.path.join(workdir, "token")
        with open(os.open(self.token, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write("%032x\n" % random.getrandbits(128))
        self.grpc, self.kv, self.http = free_port(), free_port(), free_port()
        self.launcher = None
        self.agents = {}
        self.env = dict(os.environ, HVD_CHAOS_MARKER=self.marker, HVD_LAUNCHER="", HVD_TOKEN_FILE="")

    def spawn(self, argv, log):
        return subprocess.Popen(argv, env=self.env, cwd=self.dir, start_new_session=True,
                                stdout=open(os.path.join(self.dir, log + ".out"), "ab"),
                                stderr=open(os.path.join(self.dir, log + ".err"), "ab"))

    def start_launcher(self):
        self.launcher = self.spawn(
            [f"{self.build}/launcherd/hvd-launcherd", "--listen", f"127.0.0.1:{self.grpc}",
             "--rendezvous-listen", f"127.0.0.1:{self.kv}", "--http", f"127.0.0.1:{self.http}",
             "--token-file", self.token, "--state-dir", os.path.join(self.dir, "launcher"),
             "--lease-ms", str(self.lease_ms), "--heartbeat-interval-ms", "500",
             "--kill-grace-ms", "2000"], "launcher")

    def start_agent(self, host):
        self.agents[host] = self.spawn(
            [f"{self.build}/agent/hvd-agent", "--launcher", f"127.0.0.1:{self.grpc}",
             "--token-file", self.token, "--slots", "2", "--host", host,
             "--state-dir", os.path.join(self.dir, "agent-" + host)], "agent-" + host)

    def rest(self, path):
        try:
            # /v1/* needs the cluster token as a bearer token.
            with open(self.token) as f:
                auth = {"Authorization": "Bearer " + f.read().strip()}
            req = urllib.request.Request(f"http://127.0.0.1:{self.http}{path}", headers=auth)
            with urllib.request.urlopen(req, timeout=5) as r:
                return json.loads(r.read())
        except (OSError, ValueError):
            return None

    def wait(self, pred, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = pred()
            if value:
                return value
            time.sleep(0.02)
        return None

    def agents_ready(self):
        a = self.rest("/v1/agents")
        return a and {x["host"] for x in a["agents"] if x["state"] == "READY"} >= set(self.agents)

    def start(self):
        self.start_launcher()
        for host in ("node-a", "node-b"):
            self.start_agent(host)
        if not self.wait(self.agents_ready, 20):
            raise RuntimeError("the cluster did not come up; see " + self.dir)

    def daemons(self):
        ps = [self.launcher] + list(self.agents.values())
        return {p.pid for p in ps if p is not None and p.poll() is None}

    def hvdrun(self, args, log):
        argv = [f"{self.build}/cli/hvdrun", "--launcher", f"127.0.0.1:{self.grpc}",
                "--token-file", self.token] + args
        return self.spawn(argv, log)

    def stop(self):
        for p in list(self.agents.values()) + [self.launcher]:
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in list(self.agents.values()) + [self.launcher]:
            if p is not None:
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
        for pid in marked(self.marker):
            os.kill(pid, signal.SIGKILL)


def job_ids(c):
    jobs = c.rest("/v1/jobs")
    return {j["id"] for j in jobs["jobs"]} if jobs else set()


def trial(c, cls, n):
    """Runs one trial; returns (ms or None, orphans, hung, note)."""
    worker = f"{c.build}/tests/fault_worker"
    before = job_ids(c)
    flags = ["-np", "4", "-H", "node-a:2,node-b:2"]
    wargs = ["--steps", "0"]
    if cls == "kill_child":
        wargs += ["--child", "--daemon"]
    if cls == "sigstop_rank":
        flags += ["--stall-check-time", "1", "--stall-timeout", "3"]
    if cls == "exit3":
        wargs += ["--exit-rank", str(random.randrange(4)), "--exit-at", str(random.randrange(5, 60)),
                  "--exit-code", "3"]
    if cls == "missing_binary":
        run = c.hvdrun(flags + ["/nonexistent/train"], f"trial{n}")
        t0 = time.monotonic()
        run.wait(TRIAL_BOUND_S)
        return (time.monotonic() - t0) * 1000, [], False, "exit %s" % run.returncode
    run = c.hvdrun(flags + [worker] + wargs, f"trial{n}")
    job = c.wait(lambda: next(iter(job_ids(c) - before), None), 15)
    if not job:
        run.kill()
        return None, [], True, "no job appeared"
    running = c.wait(lambda: (lambda j: j if j and j["state"] == "RUNNING" and all(
        r["state"] == "RUNNING" for r in j["ranks"]) else None)(c.rest("/v1/jobs/" + job)), 15)
    if not running:
        run.kill()
        return None, [], True, "job never ran"
    time.sleep(random.uniform(0.1, 1.5))  # a random moment into the training
    pids = [r["pid"] for r in running["ranks"]]
    victim = random.randrange(4)
    t0 = time.monotonic()
    note = ""
    if cls == "kill_rank":
        os.kill(pids[victim], signal.SIGKILL)
    elif cls == "kill_child":
        kids = [int(x) for x in open(f"/proc/{pids[victim]}/task/{pids[victim]}/children").read().split()]
        os.kill(kids[0], signal.SIGKILL)
    elif cls == "exit3":
        t0 = None  # the worker picks its moment; timed from its recorded end below
    elif cls == "sigstop_rank":
        os.kill(pids[victim], signal.SIGSTOP)
    elif cls == "kill_agent":
        host = random.choice(["node-a", "node-b"])
        c.agents[host].send_signal(signal.SIGKILL)
        c.agents[host].wait()
        note = host
    elif cls == "kill_hvdrun":
        run.send_signal(signal.SIGKILL)
    elif cls == "kill_launcher_restart":
        c.launcher.send_signal(signal.SIGKILL)
        c.launcher.wait()
        killed = time.monotonic()
        time.sleep(random.uniform(0.1, 0.8))
        t0 = time.monotonic()
        c.start_launcher()
        ready = c.wait(c.agents_ready, 10)
        ms = (time.monotonic() - t0) * 1000 if ready else None
        state = (c.rest("/v1/jobs/" + job) or {})
        outage = (t0 - killed) * 1000 + (ms or 0)
        note = "recovered, job %s" % state.get("state", "?")
        if state.get("state") != "RUNNING":
            # Back later than the agents' lease: they ended the job, as they must. Not a hang.
            note += " (launcher gone %.0f ms > lease: %s)" % (outage, state.get("reason", ""))
        run.send_signal(signal.SIGINT)  # end the trial
        try:
            run.wait(TRIAL_BOUND_S)
        except subprocess.TimeoutExpired:
            run.kill()
        left = c.wait(lambda: not marked(c.marker, c.daemons(), job), 10)
        return ms, [] if left else marked(c.marker, c.daemons(), job), not ready, note
    # Wait for the end: the job final in the launcher and no process of it left.
    done = c.wait(lambda: (lambda j: j if j and j["state"] in ("FAILED", "CANCELLED", "SUCCEEDED")
                           and not marked(c.marker, c.daemons(), job) else None)(
        c.rest("/v1/jobs/" + job)), TRIAL_BOUND_S)
    end = time.monotonic()
    try:
        run.wait(TRIAL_BOUND_S if cls != "kill_hvdrun" else 1)
    except subprocess.TimeoutExpired:
        run.kill()
    if cls == "kill_agent":
        c.start_agent(note)
        c.wait(c.agents_ready, 20)
    orphans = marked(c.marker, c.daemons())
    orphans = [p for p in orphans if p != run.pid]
    for p in orphans:
        os.kill(p, signal.SIGKILL)
    if not done:
        return None, orphans, True, "did not end"
    if t0 is None:  # exit3: from the failing rank's recorded end to the last rank's end
        ends = [r["end_time_ms"] for r in done["ranks"]]
        failed = done["failure"]["rank"] if done.get("failure") else None
        ms = (max(ends) - done["ranks"][failed]["end_time_ms"]) if failed is not None else None
        return ms, orphans, False, done["state"]
    return (end - t0) * 1000, orphans, False, done["state"]


def pct(values, p):
    v = sorted(values)
    return v[min(len(v) - 1, int(round(p / 100 * (len(v) - 1))))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--per-class", type=int, default=0, help="run each class N times instead")
    ap.add_argument("--seed", type=int, default=None)
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    for b in ("launcherd/hvd-launcherd", "agent/hvd-agent", "cli/hvdrun", "tests/fault_worker"):
        if not os.access(os.path.join(build, b), os.X_OK):
            sys.exit(f"chaos: {build}/{b} is missing: build first (./scripts/build.sh)")
    seed = a.seed if a.seed is not None else random.randrange(1 << 30)
    random.seed(seed)
    plan = ([cls for cls in CLASSES for _ in range(a.per_class)] if a.per_class
            else [random.choice(CLASSES) for _ in range(a.trials)])
    if not a.per_class:
        random.shuffle(plan)
    workdir = tempfile.mkdtemp(prefix="hvd-chaos.")
    c = Cluster(build, workdir)
    results = {cls: [] for cls in CLASSES}
    orphans_total, hangs = 0, 0
    print(f"chaos: seed {seed}, {len(plan)} trials, logs in {workdir}", flush=True)
    try:
        c.start()
        for n, cls in enumerate(plan):
            ms, orphans, hung, note = trial(c, cls, n)
            orphans_total += len(orphans)
            hangs += hung
            if ms is not None:
                results[cls].append(ms)
            print(f"trial {n:3d} {cls:22s} {('%.0f ms' % ms) if ms is not None else '-':>9s}"
                  f" orphans {len(orphans)} {'HUNG ' if hung else ''}{note}", flush=True)
    finally:
        c.stop()
    print(f"\ntrials {len(plan)}, orphans found {orphans_total}, hangs {hangs}")
    print(f"{'class':24s} {'n':>4s} {'p50 ms':>8s} {'p99 ms':>8s} {'worst ms':>9s}")
    every = []
    for cls in CLASSES:
        v = results[cls]
        if not v:
            continue
        if cls != "kill_launcher_restart":
            every += v
        print(f"{cls:24s} {len(v):4d} {statistics.median(v):8.0f} {pct(v, 99):8.0f} {max(v):9.0f}")
    if every:
        print(f"{'all but recovery':24s} {len(every):4d} {statistics.median(every):8.0f} "
              f"{pct(every, 99):8.0f} {max(every):9.0f}")
    return 1 if orphans_total or hangs else 0


if __name__ == "__main__":
    sys.exit(main())
