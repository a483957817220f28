#include "cli/job_format.h"

#include <algorithm>
#include <cstdio>
#include <string_view>

#include "base/clock.h"
#include "control/job_state.h"

namespace hvd::cli {
namespace {

// Left-aligned columns separated by two spaces, the header first.
std::string Table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& row : rows) {
    if (width.size() < row.size()) width.resize(row.size(), 0);
    for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(width[i] - row[i].size() + 2, ' ');
    }
    out += line + "\n";
  }
  return out;
}

// How long ago `ms` was, or how long a job ran: "-" when the time is unknown.
std::string Since(int64_t from_ms, int64_t to_ms) {
  return from_ms <= 0 ? "-" : FormatDuration(to_ms - from_ms);
}

std::string RankEnd(const control::RankStatus& r) {
  if (r.signal != 0) return control::SignalName(r.signal);
  if (r.state == control::RankState::kExited) return "exit " + std::to_string(r.exit_code);
  if (!r.error.empty()) return r.error;
  return "";
}

// Why a job did not succeed, each line starting with `prefix`. Nothing for a job that succeeded
// or has not ended: a RUNNING or PENDING job has not failed (a RESTARTING one says why in its
// reason and previous failures).
std::string FailureLines(const control::JobStatus& status, const std::string& prefix) {
  using control::JobState;
  switch (status.state) {
    case JobState::kSucceeded:
    case JobState::kPending:
    case JobState::kStarting:
    case JobState::kRunning:
    case JobState::kRestarting:
      return "";
    case JobState::kUnspecified:  // a state this build does not know: said as a failure
    case JobState::kFailed:
    case JobState::kCancelled:
      break;
  }
  const std::string job = "job " + status.id;
  const std::string reason = status.reason.empty() ? "" : ": " + status.reason;
  if (status.state == JobState::kCancelled) {
    // The launcher's reasons say "cancelled: by hvdrun cancel": said once here.
    std::string_view why = status.reason;
    constexpr std::string_view kSaid = "cancelled: ";
    if (why.substr(0, kSaid.size()) == kSaid) why.remove_prefix(kSaid.size());
    return prefix + job + " was cancelled" + (why.empty() ? "" : ": " + std::string(why)) + "\n";
  }
  if (!status.has_failure) return prefix + job + " failed" + reason + "\n";
  const control::JobFailure& f = status.failure;
  const std::string what = !f.message.empty()
                               ? f.message
                               : control::DescribeRankExit(f.rank, f.host, f.exit_code, f.signal);
  const int restarts = static_cast<int>(status.previous_failures.size());
  std::string out = prefix + job + " failed: " + what +
                    (restarts == 0 ? ""
                                   : " (after " + std::to_string(restarts) + " restart" +
                                         (restarts == 1 ? "" : "s") + ")") +
                    "\n";
  // Nothing but blank lines: no heading over nothing.
  if (f.stderr_tail.find_first_not_of(" \t\r\n") == std::string::npos) return out;
  // An elastic job's failures name workers by id (docs/elastic.md), not by their last rank.
  out += prefix + "last stderr lines of " +
         (control::IsElastic(status.spec) ? "worker " : "rank ") + std::to_string(f.rank) + ":\n";
  size_t start = 0;
  while (start < f.stderr_tail.size()) {
    size_t nl = f.stderr_tail.find('\n', start);
    if (nl == std::string::npos) nl = f.stderr_tail.size();
    out += prefix + "  " + f.stderr_tail.substr(start, nl - start) + "\n";
    start = nl + 1;
  }
  return out;
}

// -np, or an elastic job's current workers and its range: "3 (2..4)".
std::string NpText(const control::JobStatus& st) {
  if (!control::IsElastic(st.spec) || st.elastic.generation < 0) return std::to_string(st.spec.np);
  return std::to_string(st.elastic.workers.size()) + " (" + std::to_string(st.spec.min_np) + ".." +
         std::to_string(st.spec.max_np) + ")";
}

}  // namespace

std::string WaitingText(const control::JobStatus& st, int64_t now_ms) {
  // Seconds as the launcher writes them ("waited 3.1 s for slots"), so both lines compare.
  auto seconds = [](int64_t ms) {
    return base::SecondsText(std::chrono::milliseconds(std::max<int64_t>(0, ms)));
  };
  std::string out = st.queued_since_ms > 0 ? "for " + seconds(now_ms - st.queued_since_ms)
                                           : "since an unknown time";
  if (st.spec.queue_timeout_ms > 0) {
    out += " of at most " + seconds(st.spec.queue_timeout_ms) + " (--queue-timeout)";
  }
  return out;
}

const char* JobStateText(control::JobState state) {
  return control::JobStateName(state);
}

const char* RankStateText(control::RankState state) {
  return control::RankStateName(state);
}

int JobExitCode(const control::JobStatus& status) {
  if (status.state == control::JobState::kSucceeded) return status.exit_code;
  if (status.exit_code != 0) return status.exit_code;
  return status.state == control::JobState::kCancelled ? control::kCancelledExitCode
                                                       : control::kGenericFailureExitCode;
}

std::string FailureSummary(const control::JobStatus& status) {
  return FailureLines(status, "hvdrun: ");
}

std::string JobDetail(const control::JobStatus& st, int64_t now_ms) {
  const control::JobSpec& spec = st.spec;
  std::string out;
  auto field = [&out](const char* label, const std::string& value) {
    std::string l = std::string(label) + ":";
    l.resize(std::max<size_t>(11, l.size() + 1), ' ');
    out += l + value + "\n";
  };
  field("job", st.id + (spec.name.empty() ? "" : " (" + spec.name + ")"));
  field(
      "state",
      std::string(JobStateText(st.state)) +
          (control::IsTerminal(st.state) ? ", exit code " + std::to_string(JobExitCode(st)) : ""));
  if (!st.reason.empty()) field("reason", st.reason);
  std::string cmd;
  for (const std::string& a : spec.argv) cmd += (cmd.empty() ? "" : " ") + a;
  field("command", cmd);
  std::string ranks = NpText(st);
  if (!spec.hosts.empty()) {
    std::string hosts;
    for (const control::HostRequest& h : spec.hosts) {
      hosts += (hosts.empty() ? "" : ",") + h.host + ":" + std::to_string(h.slots);
    }
    ranks += " on " + hosts;
  }
  field("ranks", ranks + (spec.detached ? " (detached)" : ""));
  if (!spec.working_dir.empty()) field("dir", spec.working_dir);
  if (!spec.run_as.empty()) field("run as", spec.run_as);  // --run-as; else the agent's user
  if (st.submit_time_ms > 0) field("submitted", Since(st.submit_time_ms, now_ms) + " ago");
  if (st.state == control::JobState::kPending) field("waiting", WaitingText(st, now_ms));
  if (st.start_time_ms > 0) {
    const int64_t end = st.end_time_ms > 0 ? st.end_time_ms : now_ms;
    field("ran", FormatDuration(end - st.start_time_ms));
  }
  if (spec.max_restarts > 0 || st.attempt > 0) {
    field("attempt", std::to_string(st.attempt + 1) + " of " +
                         std::to_string(spec.max_restarts + 1) + " (--max-restarts " +
                         std::to_string(spec.max_restarts) + ")");
  }
  for (size_t i = 0; i < st.previous_failures.size(); ++i) {
    field(("attempt " + std::to_string(i + 1)).c_str(),
          "failed: " + st.previous_failures[i].message);
  }
  if (control::IsElastic(spec)) {
    const control::ElasticStatus& e = st.elastic;
    std::string workers;
    for (int w : e.workers) workers += (workers.empty() ? "" : ",") + std::to_string(w);
    field("elastic", "--min-np " + std::to_string(spec.min_np) + ", --max-np " +
                         std::to_string(spec.max_np) + "; generation " +
                         std::to_string(e.generation) + ": workers " + workers);
    for (const control::MembershipEvent& ev : e.events) {
      field("membership", Since(ev.time_ms, now_ms) + " ago: " + ev.what);
    }
  }
  if (!st.stall.empty()) {
    field("stalled", st.stall + " (since " + Since(st.stall_since_ms, now_ms) + " ago)");
  }
  if (st.network.decided) field("network", st.network.summary);
  out += FailureLines(st, "");
  if (st.ranks.empty()) return out;
  std::vector<std::vector<std::string>> rows = {{"RANK", "HOST", "LOCAL", "STATE", "PID", "END"}};
  for (const control::RankStatus& r : st.ranks) {
    const control::RankSlot& p = r.placement;
    rows.push_back({std::to_string(p.rank), p.host,
                    std::to_string(p.local_rank) + "/" + std::to_string(p.local_size),
                    RankStateText(r.state), r.pid > 0 ? std::to_string(r.pid) : "-", RankEnd(r)});
  }
  return out + "\n" + Table(rows);
}

std::string JobTable(const std::vector<control::JobStatus>& jobs, int64_t now_ms) {
  std::vector<std::vector<std::string>> rows = {
      {"ID", "NAME", "STATE", "NP", "SUBMITTED", "DURATION", "EXIT"}};
  for (const control::JobStatus& st : jobs) {
    const int64_t end = st.end_time_ms > 0 ? st.end_time_ms : now_ms;
    rows.push_back({st.id, st.spec.name.empty() ? "-" : st.spec.name, JobStateText(st.state),
                    NpText(st), Since(st.submit_time_ms, now_ms) + " ago",
                    Since(st.start_time_ms, end),
                    control::IsTerminal(st.state) ? std::to_string(JobExitCode(st)) : "-"});
  }
  return Table(rows);
}

std::string AgentTable(const std::vector<control::AgentInfo>& agents, int64_t now_ms) {
  std::vector<std::vector<std::string>> rows = {
      {"AGENT", "HOST", "ADDRESS", "STATE", "SLOTS", "GPUS", "HEARTBEAT", "VERSION"}};
  for (const control::AgentInfo& a : agents) {
    const std::string address = a.advertise_iface.empty()
                                    ? a.advertise_addr
                                    : a.advertise_addr + " (" + a.advertise_iface + ")";
    // An agent a restarted launcher knows only from its jobs' records has not registered with
    // it: its slots and GPUs are unknown, and it sent no heartbeat ("LOST 0/0 0 - ago" before).
    const bool heard = a.last_heartbeat_ms > 0;
    rows.push_back({a.id, a.host, address, a.state,
                    heard ? std::to_string(a.slots_in_use) + "/" + std::to_string(a.slots) : "-",
                    heard ? std::to_string(a.gpus) : "-",
                    heard ? Since(a.last_heartbeat_ms, now_ms) + " ago" : "never", a.version});
  }
  // How the LOST agents went, below the table: the last few to be heard from (the launcher keeps
  // up to 256, and agents restarted under new ids would bury the table), oldest first.
  constexpr int kMaxReasons = 5;
  std::vector<const control::AgentInfo*> lost;
  for (const control::AgentInfo& a : agents) {
    if ((a.state == "LOST" || a.state == "STOPPED") && !a.lost_reason.empty()) lost.push_back(&a);
  }
  std::stable_sort(lost.begin(), lost.end(), [](const auto* x, const auto* y) {
    return x->last_heartbeat_ms < y->last_heartbeat_ms;
  });
  std::string out = Table(rows);
  const size_t first = lost.size() > kMaxReasons ? lost.size() - kMaxReasons : 0;
  if (first > 0) out += std::to_string(first) + " agents lost or stopped earlier not shown\n";
  for (size_t i = first; i < lost.size(); ++i) {
    out += lost[i]->id + (lost[i]->state == "STOPPED" ? " stopped: " : " lost: ") +
           lost[i]->lost_reason + "\n";
  }
  return out;
}

std::string FormatDuration(int64_t ms) {
  if (ms < 0) return "-";
  char buf[32];
  const int64_t s = ms / 1000;
  if (s < 60) {
    return base::SecondsText(std::chrono::milliseconds(ms));  // "3.2 s", as everywhere
  } else if (s < 3600) {
    std::snprintf(buf, sizeof(buf), "%lldm%02llds", static_cast<long long>(s / 60),
                  static_cast<long long>(s % 60));
  } else {
    std::snprintf(buf, sizeof(buf), "%lldh%02lldm", static_cast<long long>(s / 3600),
                  static_cast<long long>((s / 60) % 60));
  }
  return buf;
}

}  // namespace hvd::cli
