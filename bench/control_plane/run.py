#!/usr/bin/python3
"""The control plane under load (issue 22): a real hvd-launcherd on 127.0.0.1 and N simulated
agents (hvd_agent_swarm, one process, the real gRPC protocol), measured from outside.

    /usr/bin/python3 bench/control_plane/run.py [--agents 1000] [--slots 8] [--heartbeat-ms 1000]
        [--jobs 100] [--job-np 80] [--state-dir] [--timeout 60] [--json FILE] [--build-dir build]

Phases, each bounded, all within --timeout seconds (what a phase cut short did not measure is
printed as "-", and the run exits 1):
  1. registration: the swarm starts every agent at once; time until GET /v1/agents lists all of
     them READY; the swarm counts its failed connection attempts (Connect calls that ended
     before their RegisterAck) and broken streams.
  2. steady state: the launcher's CPU (utime+stime from /proc/PID/stat over --steady-s), its
     threads (/proc/PID/task) and RSS; REST /v1/jobs and /metrics latency while idle.
  3. one job of agents x slots ranks (`hvdrun submit ... hvd-sim-rank --hold`): submission to
     RUNNING, then the swarm reports every rank exited 0 and the time to SUCCEEDED/FAILED.
  4. --jobs jobs of --job-np ranks submitted back to back, ranks exiting 0 after --job-run-ms:
     how many SUCCEEDED.
  REST /v1/jobs and /metrics are polled by a second thread during 3 and 4 (p50/p99/max).
Then everything is stopped (the launcher with SIGTERM, timed) and the script checks that no
process of its sessions is left. It talks only to 127.0.0.1.
"""
import argparse
import http.client
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from procfs import free_port, pct, proc_cpu_s, proc_rss_mib, proc_threads, session_members
from report import table

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


class Deadline(Exception):
    pass


class Bench:
    def __init__(self, a):
        self.a = a
        self.t_start = time.monotonic()
        self.deadline = self.t_start + a.timeout
        self.tmp = tempfile.mkdtemp(prefix="hvd-cp-bench-")
        self.token_file = os.path.join(self.tmp, "token")
        self.token = secrets.token_hex(32)
        fd = os.open(self.token_file, os.O_WRONLY | os.O_CREAT, 0o600)
        os.write(fd, (self.token + "\n").encode())
        os.close(fd)
        # The jobs' program: hvdrun checks that it exists here; the swarm's agents never run it.
        self.program = os.path.join(self.tmp, "hvd-sim-rank")
        with open(self.program, "w") as f:
            f.write("#!/bin/sh\necho 'a simulated rank: hvd_agent_swarm answers for it' >&2\n"
                    "exit 2\n")
        os.chmod(self.program, 0o755)
        self.grpc = "127.0.0.1:%d" % free_port()
        self.http_port = free_port()
        self.launcher = self.swarm = None
        self.sids = []
        self.lines = []  # the swarm's stdout
        self.lines_cv = threading.Condition()
        self.r = {}  # results

    # --- time -------------------------------------------------------------------------------
    def left(self, cap):
        rem = self.deadline - time.monotonic()
        if rem <= 0:
            raise Deadline("the --timeout of %g s ran out" % self.a.timeout)
        return min(cap, rem)

    def wait_for(self, cond, cap, every=0.05):
        end = time.monotonic() + self.left(cap)
        while True:
            v = cond()
            if v:
                return v
            if time.monotonic() >= end:
                return None
            time.sleep(every)

    # --- REST ---------------------------------------------------------------------------------
    def get(self, path, timeout=10.0):
        """(seconds, parsed JSON or text, None) or (seconds, None, error)."""
        t = time.monotonic()
        try:
            c = http.client.HTTPConnection("127.0.0.1", self.http_port, timeout=timeout)
            c.request("GET", path, headers={"Authorization": "Bearer " + self.token})
            resp = c.getresponse()
            body = resp.read()
            c.close()
            dt = time.monotonic() - t
            if resp.status != 200:
                return dt, None, "HTTP %d" % resp.status
            return dt, (json.loads(body) if path.startswith("/v1/") else body.decode()), None
        except (OSError, ValueError, http.client.HTTPException) as e:
            return time.monotonic() - t, None, str(e)

    def jobs(self):
        _, j, _ = self.get("/v1/jobs")
        return {x["id"]: x for x in j["jobs"]} if j else {}

    def sample_rest(self, stop, out):
        while not stop.is_set():
            for path in ("/v1/jobs", "/metrics"):
                dt, _, err = self.get(path, timeout=10.0)
                out.setdefault(path, []).append(dt)
                if err:
                    out.setdefault(path + " errors", []).append(err)
            stop.wait(0.05)

    def latency(self, key, samples):
        for path in ("/v1/jobs", "/metrics"):
            v = samples.get(path, [])
            self.r["%s %s p50" % (key, path)] = pct(v, 50)
            self.r["%s %s p99" % (key, path)] = pct(v, 99)
            self.r["%s %s max" % (key, path)] = max(v) if v else None
            self.r["%s %s n" % (key, path)] = len(v)
            errors = samples.get(path + " errors", [])
            self.r["%s %s errors" % (key, path)] = len(errors)
            if errors:
                self.r["%s %s error" % (key, path)] = errors[0]

    # --- processes ------------------------------------------------------------------------------
    def start_launcher(self):
        b = self.a.build_dir
        argv = [os.path.join(b, "launcherd", "hvd-launcherd"), "--listen", self.grpc,
                "--http", "127.0.0.1:%d" % self.http_port,
                "--rendezvous-listen", "127.0.0.1:%d" % free_port(),
                "--token-file", self.token_file,
                "--heartbeat-interval-ms", str(self.a.heartbeat_ms)]
        if self.a.lease_ms:
            argv += ["--lease-ms", str(self.a.lease_ms)]
        if self.a.state_dir:
            argv += ["--state-dir", os.path.join(self.tmp, "state")]
        self.launcher_log = open(os.path.join(self.tmp, "launcher.log"), "w")
        self.launcher = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self.launcher_log,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        self.sids.append(self.launcher.pid)
        ok = self.wait_for(lambda: self.launcher.poll() is not None or
                           self.get("/healthz", 1.0)[1] is not None, 10)
        if not ok or self.launcher.poll() is not None:
            raise RuntimeError("hvd-launcherd did not start:\n" + self.launcher_tail())
        self.r["launcher_rss_mib_start"] = proc_rss_mib(self.launcher.pid)

    def launcher_tail(self, n=15):
        try:
            with open(os.path.join(self.tmp, "launcher.log")) as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""

    def start_swarm(self):
        argv = [os.path.join(self.a.build_dir, "bench", "control_plane", "hvd_agent_swarm"),
                "--launcher", self.grpc, "--token-file", self.token_file,
                "--agents", str(self.a.agents), "--slots", str(self.a.slots)]
        if self.a.ramp_ms:
            argv += ["--ramp-ms", str(self.a.ramp_ms)]
        self.swarm_err = open(os.path.join(self.tmp, "swarm.err"), "w")
        self.swarm = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=self.swarm_err, start_new_session=True, text=True,
                                      bufsize=1)
        self.sids.append(self.swarm.pid)
        threading.Thread(target=self.read_swarm, daemon=True).start()

    def read_swarm(self):
        for line in self.swarm.stdout:
            with self.lines_cv:
                self.lines.append(line.rstrip("\n"))
                self.lines_cv.notify_all()

    def swarm_command(self, cmd, answer_prefix, cap=10, teardown=False):
        """Sends `cmd` and returns the first new stdout line starting with answer_prefix; waits
        at most `cap` s, and not past --timeout unless tearing down."""
        with self.lines_cv:
            seen = len(self.lines)
        try:
            self.swarm.stdin.write(cmd + "\n")
            self.swarm.stdin.flush()
        except OSError:
            return None
        end = time.monotonic() + (cap if teardown else self.left(cap))
        with self.lines_cv:
            while True:
                for line in self.lines[seen:]:
                    if line.startswith(answer_prefix):
                        return line
                seen = len(self.lines)
                rem = end - time.monotonic()
                if rem <= 0 or self.swarm.poll() is not None:
                    return None
                self.lines_cv.wait(rem)

    def swarm_stats(self, teardown=False):
        line = self.swarm_command("stats", "STATS ", 5 if teardown else 10, teardown)
        return json.loads(line[6:]) if line else {}

    def submit(self, np, program_args):
        argv = [os.path.join(self.a.build_dir, "cli", "hvdrun"), "submit", "--launcher", self.grpc,
                "--token-file", self.token_file, "-np", str(np), self.program] + program_args
        cap = self.left(60)
        try:
            p = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                               timeout=cap, start_new_session=True)
        except subprocess.TimeoutExpired:
            if cap < 60:
                raise Deadline("the --timeout of %g s ran out during hvdrun submit -np %d"
                               % (self.a.timeout, np))
            raise RuntimeError("hvdrun submit -np %d did not return within 60 s" % np)
        if p.returncode != 0:
            raise RuntimeError("hvdrun submit failed (%d): %s" % (p.returncode, p.stderr.strip()))
        return p.stdout.strip()

    # --- phases ---------------------------------------------------------------------------------
    def phase_registration(self):
        t0 = time.monotonic()
        self.start_swarm()
        n = self.a.agents

        def all_ready():
            _, j, _ = self.get("/v1/agents")
            return j is not None and sum(1 for x in j["agents"] if x["state"] == "READY") >= n
        ok = self.wait_for(all_ready, 120, every=0.05)
        self.r["ready_s"] = time.monotonic() - t0 if ok else None
        s = self.swarm_stats()
        self.r["swarm_registered_ms"] = s.get("all_registered_ms")
        self.r["failed_attempts_registration"] = s.get("failed_attempts")
        if not ok:
            raise RuntimeError("not every agent became READY: %s" % json.dumps(s)[:800])

    def phase_steady(self):
        time.sleep(self.left(max(2.0, 2.5 * self.a.heartbeat_ms / 1000.0)))  # heartbeats settle
        pid, spid = self.launcher.pid, self.swarm.pid
        c0, s0, t0 = proc_cpu_s(pid), proc_cpu_s(spid), time.monotonic()
        time.sleep(self.left(self.a.steady_s))
        dt = time.monotonic() - t0
        self.r["launcher_cpu_pct"] = 100.0 * (proc_cpu_s(pid) - c0) / dt
        self.r["swarm_cpu_pct"] = 100.0 * (proc_cpu_s(spid) - s0) / dt
        self.r["launcher_threads"] = proc_threads(pid)
        self.r["swarm_threads"] = proc_threads(spid)
        self.r["launcher_rss_mib_steady"] = proc_rss_mib(pid)
        self.r["rss_kib_per_agent"] = 1024.0 * (self.r["launcher_rss_mib_steady"] -
                                                self.r["launcher_rss_mib_start"]) / self.a.agents
        idle = {}
        for _ in range(10):
            for path in ("/v1/jobs", "/metrics"):
                idle.setdefault(path, []).append(self.get(path)[0])
        self.latency("idle", idle)

    def wait_states(self, ids, want, cap):
        """Polls GET /v1/jobs until every job in `ids` is in one of `want`; {id: job}."""
        seen = {}

        def done():
            seen.update(self.jobs())
            return all(i in seen and seen[i]["state"] in want for i in ids)
        self.wait_for(done, cap, every=0.1)
        return seen

    def phase_big_job(self):
        np = self.a.big_np or self.a.agents * self.a.slots
        self.r["big_np"] = np
        stop, samples = threading.Event(), {}
        sampler = threading.Thread(target=self.sample_rest, args=(stop, samples), daemon=True)
        sampler.start()
        cpu0 = proc_cpu_s(self.launcher.pid)
        try:
            t0 = time.monotonic()
            job = self.submit(np, ["--hold"])
            self.r["big_submit_call_s"] = time.monotonic() - t0
            terminal = ("SUCCEEDED", "FAILED", "CANCELLED")
            j = self.wait_states([job], ("RUNNING",) + terminal, 120).get(job, {})
            if j.get("state") == "RUNNING":
                self.r["big_running_s"] = time.monotonic() - t0
            t1, wall1 = time.monotonic(), time.time() * 1000
            line = self.swarm_command("release " + job, "RELEASED ")
            self.r["big_released"] = int(line.split()[1]) if line else None
            j = self.wait_states([job], terminal, 120).get(job, {})
            self.r["big_state"] = j.get("state")
            if j.get("state") in terminal:
                self.r["big_exit_to_end_s"] = time.monotonic() - t1
                if j.get("end_time_ms"):
                    self.r["big_exit_to_end_launcher_s"] = (j["end_time_ms"] - wall1) / 1000.0
            if j.get("state") != "SUCCEEDED":
                self.r["big_reason"] = (j.get("reason") or "")[:300]
        finally:
            stop.set()
            sampler.join(timeout=25)
            self.latency("big job", samples)
            self.r["launcher_cpu_s_big_job"] = proc_cpu_s(self.launcher.pid) - cpu0
            # What the ended job keeps: the launcher gives freed heap back after 1 s of quiet.
            time.sleep(2.0)
            self.r["launcher_rss_mib_after_big"] = proc_rss_mib(self.launcher.pid)
            if self.r.get("big_state") and self.r.get("launcher_rss_mib_steady"):
                self.r["rss_kib_per_rank"] = 1024.0 * (self.r["launcher_rss_mib_after_big"] -
                                                       self.r["launcher_rss_mib_steady"]) / np

    def phase_many_jobs(self):
        k, np = self.a.jobs, self.a.job_np
        stop, samples = threading.Event(), {}
        sampler = threading.Thread(target=self.sample_rest, args=(stop, samples), daemon=True)
        sampler.start()
        ids = []
        terminal = ("SUCCEEDED", "FAILED", "CANCELLED")
        try:
            t0 = time.monotonic()
            for _ in range(k):
                ids.append(self.submit(np, ["--run-ms=%d" % self.a.job_run_ms]))
            self.r["many_submit_s"] = time.monotonic() - t0
            self.wait_states(ids, terminal, 180)
            self.r["many_total_s"] = time.monotonic() - t0
        finally:
            stop.set()
            seen = self.jobs()  # cut short by --timeout: what the jobs had come to by then
            states = [seen.get(i, {}).get("state", "?") for i in ids]
            self.r["many_submitted"] = len(ids)
            self.r["many_succeeded"] = states.count("SUCCEEDED")
            self.r["many_failed"] = states.count("FAILED")
            self.r["many_unfinished"] = len(ids) - sum(states.count(x) for x in terminal)
            reasons = [seen[i].get("reason", "") for i in ids
                       if seen.get(i, {}).get("state") == "FAILED"]
            if reasons:
                self.r["many_reasons"] = [x[:200] for x in reasons[:3]]
            sampler.join(timeout=25)
            self.latency("many jobs", samples)
            self.r["launcher_rss_mib_end"] = proc_rss_mib(self.launcher.pid)

    # --- teardown ---------------------------------------------------------------------------
    def teardown(self):
        swarm_up = self.swarm is not None and self.swarm.poll() is None
        if swarm_up:
            s = self.swarm_stats(teardown=True)
            if s:
                self.r["swarm_final"] = {k: s[k] for k in (
                    "attempts", "failed_attempts", "stream_breaks", "heartbeats", "rank_events", "event_acks",
                    "starts", "stops", "lease_kills", "max_write_queue", "timer_max_lag_ms",
                    "errors") if k in s}
        # The launcher first, its agents still connected: SIGTERM must stop it whatever it does.
        if self.launcher is not None and self.launcher.poll() is None:
            t = time.monotonic()
            self.launcher.send_signal(signal.SIGTERM)
            try:
                self.launcher.wait(10)
                self.r["launcher_stop_s"] = time.monotonic() - t
            except subprocess.TimeoutExpired:
                self.r["launcher_stop_s"] = "over 10 s: killed"
                os.killpg(self.launcher.pid, signal.SIGKILL)
                self.launcher.wait(5)
        if swarm_up:
            try:
                self.swarm.stdin.write("quit\n")
                self.swarm.stdin.flush()
            except OSError:
                pass
            try:
                self.swarm.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.swarm.pid, signal.SIGKILL)
                self.swarm.wait(5)
        for sid in self.sids:  # anything else in their sessions
            try:
                os.killpg(sid, signal.SIGKILL)
            except OSError:
                pass
        left = []
        end = time.monotonic() + 5
        while time.monotonic() < end:
            left = session_members(set(self.sids))
            if not left:
                break
            time.sleep(0.1)
        self.r["leftover_processes"] = left
        if not self.a.keep_tmp:
            shutil.rmtree(self.tmp, ignore_errors=True)
        return not left


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--agents", type=int, default=1000)
    p.add_argument("--slots", type=int, default=8)
    p.add_argument("--heartbeat-ms", type=int, default=1000, help="the launcher's interval")
    p.add_argument("--lease-ms", type=int, default=0, help="the launcher's (default: its own)")
    p.add_argument("--state-dir", action="store_true", help="give the launcher a --state-dir")
    p.add_argument("--ramp-ms", type=int, default=0, help="spread the agents' first connects")
    p.add_argument("--steady-s", type=float, default=5.0, help="CPU measurement window")
    p.add_argument("--big-np", type=int, default=0, help="the big job's ranks (agents x slots)")
    p.add_argument("--no-big-job", action="store_true")
    p.add_argument("--jobs", type=int, default=100, help="back-to-back jobs (0: none)")
    p.add_argument("--job-np", type=int, default=80)
    p.add_argument("--job-run-ms", type=int, default=200, help="how long their ranks run")
    p.add_argument("--timeout", type=float, default=60.0, help="cap on the whole run, seconds")
    p.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    p.add_argument("--json", help="also write the figures here")
    p.add_argument("--keep-tmp", action="store_true", help="keep the logs' directory")
    p.add_argument("--check", action="store_true",
                   help="exit 1 unless every agent became READY and every job SUCCEEDED "
                   "(ctest's smoke run)")
    a = p.parse_args()
    a.build_dir = os.path.abspath(a.build_dir)
    for rel in ("launcherd/hvd-launcherd", "bench/control_plane/hvd_agent_swarm", "cli/hvdrun"):
        if not os.access(os.path.join(a.build_dir, rel), os.X_OK):
            sys.exit("run.py: %s/%s is missing: build it first (cmake --build build --target "
                     "hvd-launcherd hvd_agent_swarm hvdrun)" % (a.build_dir, rel))
    b = Bench(a)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    error = None
    try:
        b.start_launcher()
        b.phase_registration()
        b.phase_steady()
        if not a.no_big_job:
            b.phase_big_job()
        if a.jobs > 0:
            b.phase_many_jobs()
    except (Deadline, RuntimeError, subprocess.TimeoutExpired, OSError) as e:
        error = str(e)
    finally:
        if b.launcher is not None and b.launcher.poll() is not None and not error:
            error = "hvd-launcherd exited (%s):\n%s" % (b.launcher.returncode, b.launcher_tail())
        clean = b.teardown()
    print("control plane, %s, %d CPUs, %s" % (os.uname().nodename, os.cpu_count(),
                                             time.strftime("%Y-%m-%d %H:%M")))
    print(table(a, b.r))
    if "swarm_final" in b.r:
        print("swarm: " + json.dumps(b.r["swarm_final"]))
    for k in ("big_reason", "many_reasons"):
        if k in b.r:
            print("%s: %s" % (k, b.r[k]))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"args": vars(a), "results": b.r, "error": error}, f, indent=1)
    if error:
        print("run.py: stopped early: " + error, file=sys.stderr)
    if not clean:
        print("run.py: processes left over: %s" % b.r["leftover_processes"], file=sys.stderr)
    failed = []
    if a.check:
        r = b.r
        if r.get("ready_s") is None:
            failed.append("not every agent became READY")
        if not a.no_big_job and r.get("big_state") != "SUCCEEDED":
            failed.append("the big job ended %s" % r.get("big_state"))
        if a.jobs > 0 and r.get("many_succeeded") != a.jobs:
            failed.append("%s of %d jobs SUCCEEDED" % (r.get("many_succeeded"), a.jobs))
        if isinstance(r.get("launcher_stop_s"), str):  # "over 10 s: killed"
            failed.append("the launcher did not stop on SIGTERM: " + r["launcher_stop_s"])
        for f in failed:
            print("run.py --check: " + f, file=sys.stderr)
    sys.exit(1 if error or not clean or failed else 0)


if __name__ == "__main__":
    main()
