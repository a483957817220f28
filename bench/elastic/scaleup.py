#!/usr/bin/python3
"""Scale-up time of an elastic job (docs/reliability.md, "Elastic recovery"): from a new agent's
registration to its workers' first completed allreduce in the grown job.

Each round starts hvd-launcherd and one hvd-agent (node-a, 2 slots) on 127.0.0.1, runs
tests/cli/elastic_program.py through hvdrun with -np 2 --min-np 1 --max-np 4, and once the job
has trained for a moment starts a second agent (node-b, 2 slots). The launcher starts workers 2
and 3 there; they join the new generation and wait; workers 0 and 1 move to it at their next
commit (every step commits; a step sleeps 50 ms). Registration is when REST /v1/agents first shows
node-b READY (polled every 5 ms, so the figure is at most that much short); the workers print
when their first allreduce completed. Everything it starts is stopped at the end of the round.

  /usr/bin/python3 bench/elastic/scaleup.py [--rounds 10] [--build build]
"""
import argparse
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Round:
    def __init__(self, build, tmp):
        self.build, self.tmp, self.procs = build, tmp, []
        self.token = os.urandom(16).hex()
        self.token_file = os.path.join(tmp, "token")
        fd = os.open(self.token_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.write(fd, (self.token + "\n").encode())
        os.close(fd)
        self.grpc = "127.0.0.1:%d" % free_port()
        self.http = free_port()

    def start(self, argv, name):
        out = open(os.path.join(self.tmp, name + ".log"), "w")
        p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append(p)
        return p

    def agents(self):
        req = urllib.request.Request("http://127.0.0.1:%d/v1/agents" % self.http,
                                     headers={"Authorization": "Bearer " + self.token})
        try:
            with urllib.request.urlopen(req, timeout=2) as r:
                return json.load(r).get("agents", [])
        except OSError:
            return []

    def wait_ready(self, host, timeout, poll=0.005):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if any(a["host"] == host and a["state"] == "READY" for a in self.agents()):
                return time.time()
            time.sleep(poll)
        raise RuntimeError("agent %s never READY" % host)

    def agent(self, host):
        return self.start([os.path.join(self.build, "agent", "hvd-agent"), "--launcher", self.grpc,
                           "--token-file", self.token_file, "--slots", "2", "--host", host],
                          "agent-" + host)

    def run(self, timeout):
        b = self.build
        self.start([os.path.join(b, "launcherd", "hvd-launcherd"), "--listen", self.grpc,
                    "--rendezvous-listen", "127.0.0.1:%d" % free_port(), "--http",
                    "127.0.0.1:%d" % self.http, "--token-file", self.token_file,
                    "--heartbeat-interval-ms", "500"], "launcher")
        self.agent("node-a")
        self.wait_ready("node-a", 15, poll=0.05)
        job = subprocess.Popen(
            [os.path.join(b, "cli", "hvdrun"), "--launcher", self.grpc, "--token-file",
             self.token_file, "-x", "PYTHONPATH=" + os.path.join(b, "python"), "-np", "2",
             "--min-np", "1", "--max-np", "4", "/usr/bin/python3",
             os.path.join(ROOT, "tests", "cli", "elastic_program.py"), "--steps", "100",
             "--step-sleep", "0.05", "--report-first"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        self.procs.append(job)
        time.sleep(3)  # the job trains on node-a
        self.agent("node-b")
        registered = self.wait_ready("node-b", 15)
        out, _ = job.communicate(timeout=timeout)
        firsts = [float(t) for w, t in re.findall(r"worker (\d+) first allreduce at ([0-9.]+)",
                                                   out) if int(w) >= 2]
        if job.returncode != 0 or len(firsts) != 2:
            raise RuntimeError("job failed or did not grow:\n" + out[-3000:])
        return max(firsts) - registered

    def stop(self):
        for p in reversed(self.procs):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--timeout", type=float, default=120, help="seconds per job")
    a = ap.parse_args()
    if a.rounds < 1:
        ap.error("--rounds must be at least 1")
    for f in ("cli/hvdrun", "agent/hvd-agent", "launcherd/hvd-launcherd"):
        if not os.path.exists(os.path.join(a.build, f)):
            ap.error("no %s/%s: build first (./scripts/build.sh)" % (a.build, f))
    print("machine: %d CPUs" % os.cpu_count(), flush=True)
    times, failed = [], 0
    for i in range(a.rounds):
        with tempfile.TemporaryDirectory() as tmp:
            r = Round(a.build, tmp)
            try:
                t = r.run(a.timeout)
                times.append(t)
                print("round %2d  %.1f ms" % (i + 1, t * 1e3), flush=True)
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                failed += 1
                print("round %2d  FAILED: %s" % (i + 1, e), flush=True)
            finally:
                r.stop()
    if times:
        print("scale-up: median %.1f ms  worst %.1f ms  best %.1f ms  (%d of %d rounds)" %
              (statistics.median(times) * 1e3, max(times) * 1e3, min(times) * 1e3, len(times),
               a.rounds))
        print("goal (median under 2 s, every round grew): %s" %
              ("met" if not failed and statistics.median(times) < 2 else "MISSED"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
