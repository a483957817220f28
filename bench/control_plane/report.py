"""run.py's table: each figure next to issue 22's goal for it."""


ROWS = [  # (label, key, format, issue 22's goal)
    ("agents x slots", None, None, ""),
    ("all READY after (REST /v1/agents)", "ready_s", "%.2f s", "<= 2 s"),
    ("  the swarm's own count", "swarm_registered_ms", "%d ms", ""),
    ("failed connection attempts (registration)", "failed_attempts_registration", "%d", "0"),
    ("launcher CPU, steady state", "launcher_cpu_pct", "%.1f %% of a core", "<= 10 %"),
    ("launcher threads, steady state", "launcher_threads", "%d", "independent of agents"),
    ("launcher RSS, steady state", "launcher_rss_mib_steady", "%.1f MiB", ""),
    ("  growth per agent since its start", "rss_kib_per_agent", "%.1f KiB", "recorded"),
    ("swarm CPU / threads, steady state", None, None, ""),
    ("REST idle /v1/jobs p50 / p99", None, "idle /v1/jobs", ""),
    ("REST idle /metrics p50 / p99", None, "idle /metrics", ""),
    ("big job ranks", "big_np", "%d", ""),
    ("  submit -> all RUNNING", "big_running_s", "%.2f s", "<= 2 s"),
    ("  exits -> end (polled)", "big_exit_to_end_s", "%.2f s", "<= 1 s"),
    ("  exits -> end (launcher's end_time)", "big_exit_to_end_launcher_s", "%.2f s", ""),
    ("  final state", "big_state", "%s", "SUCCEEDED"),
    ("  launcher CPU during the job", "launcher_cpu_s_big_job", "%.1f s", ""),
    ("  launcher RSS 2 s after it", "launcher_rss_mib_after_big", "%.1f MiB", ""),
    ("  growth per rank of the ended job", "rss_kib_per_rank", "%.2f KiB", "<= 1 KiB"),
    ("REST during big job /v1/jobs p50 / p99", None, "big job /v1/jobs", "p99 < 100 ms"),
    ("REST during big job /metrics p50 / p99", None, "big job /metrics", "p99 < 100 ms"),
    ("back-to-back jobs SUCCEEDED", None, None, "all"),
    ("  submitting them took", "many_submit_s", "%.1f s", ""),
    ("  first submit -> all ended", "many_total_s", "%.1f s", ""),
    ("REST during them /v1/jobs p50 / p99", None, "many jobs /v1/jobs", "p99 < 100 ms"),
    ("REST during them /metrics p50 / p99", None, "many jobs /metrics", "p99 < 100 ms"),
    ("launcher RSS at the end", "launcher_rss_mib_end", "%.1f MiB", ""),
    ("launcher stop on SIGTERM", "launcher_stop_s", "%s", "<= 1 s"),
    ("processes left over", "leftover_processes", "%s", "none"),
]


def table(a, r):
    out = []
    for label, key, fmt, goal in ROWS:
        v = r.get(key) if key else None
        if label == "agents x slots":
            text = "%d x %d (heartbeat %d ms%s)" % (a.agents, a.slots, a.heartbeat_ms,
                                                     ", state dir" if a.state_dir else "")
        elif label.startswith("swarm CPU"):
            text = ("%.1f %% / %s" % (r["swarm_cpu_pct"], r.get("swarm_threads"))
                    if "swarm_cpu_pct" in r else "-")
        elif label.startswith("back-to-back"):
            text = ("%s / %d (%s FAILED) x %d ranks" % (r["many_succeeded"], a.jobs,
                                                        r.get("many_failed"), a.job_np)
                    if "many_succeeded" in r else "-")
            if r.get("many_submitted", a.jobs) < a.jobs or r.get("many_unfinished"):
                text += "; cut short: %d submitted, %d unfinished" % (
                    r["many_submitted"], r["many_unfinished"])
        elif key is None:
            p50, p99 = r.get(fmt + " p50"), r.get(fmt + " p99")
            text = ("%.1f / %.1f ms (n=%d%s)" % (
                p50 * 1e3, p99 * 1e3, r.get(fmt + " n", 0),
                ", %d failed" % r[fmt + " errors"] if r.get(fmt + " errors") else "")
                if p50 is not None else "-")
        elif v is None:
            text = "-"
        elif key == "launcher_stop_s" and not isinstance(v, str):
            text = "%.2f s" % v
        elif key == "leftover_processes":
            text = ", ".join(map(str, v)) or "none"
        else:
            text = fmt % v
        out.append("| %-44s | %-34s | %-22s |" % (label, text, goal))
    return "\n".join(["| %-44s | %-34s | %-22s |" % ("", "measured", "issue 22's goal"),
                      "|" + "-" * 46 + "|" + "-" * 36 + "|" + "-" * 24 + "|"] + out)
