#include "launcherd/job_supervision.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>

#include "base/clock.h"
#include "base/logging.h"
#include "control/log_escape.h"

namespace hvd::launcherd {
namespace {

// "45 s"; below 10 s with a tenth: "0.2 s".
std::string Seconds(std::chrono::steady_clock::duration d) {
  const double s = std::chrono::duration<double>(d).count();
  char buf[32];
  std::snprintf(buf, sizeof buf, s < 10 ? "%.1f s" : "%.0f s", s);
  return buf;
}

// Where elastic worker `id` (one added later) stands against its own start timeout: untimed
// (not yet running and a member, or added before a launcher restart), in time, or overdue.
enum class OwnTime { kUntimed, kInTime, kOverdue };
OwnTime OwnTimeOf(const Job& job, int id, std::chrono::milliseconds timeout, Instant now) {
  Job::Clock::time_point since;
  if (!job.WaitedSince(id, &since)) return OwnTime::kUntimed;
  return now.steady - since < timeout ? OwnTime::kInTime : OwnTime::kOverdue;
}

}  // namespace

Supervisor::Next Supervisor::Check(Job& job, Instant now, const AgentConnected& connected,
                                   const AgentBacklog& backlog) const {
  const JobState state = job.state();
  if (job.terminal()) return Next::kNothing;
  if (CheckClientLease(job, now)) return Next::kSettle;
  // RESTARTING: settling starts the next attempt once the back-off has passed.
  if (state == JobState::kRestarting) return Next::kSettle;
  if (job.HeldDue(now.steady)) {
    job.ReleaseHeld(now);  // the failure it blamed never came: it is the cause after all
    return Next::kSettle;
  }
  if (state == JobState::kPending) {
    if (CheckQueueTimeout(job, now)) return Next::kSettle;
    return CheckMasterPort(job, now, connected, backlog);
  }
  if (state == JobState::kStarting || state == JobState::kRunning) {
    if (job.ElasticDue(now.steady)) {
      job.ElasticTimeout(now);
      return Next::kSettle;
    }
    bool changed = CheckStartTimeout(job, now);
    changed |= job.ResendRemovals(now.steady);
    if (!job.terminal()) changed |= CheckLeftBeforeInit(job, now);
    if (!job.terminal()) changed |= CheckStallTimeout(job, now);
    return changed ? Next::kSettle : Next::kNothing;
  }
  return Next::kNothing;
}

bool Supervisor::CheckClientLease(Job& job, Instant now) const {
  if (job.status.spec.detached || job.watchers > 0 ||
      now.steady - job.unwatched_since <= options_.client_lease) {
    return false;
  }
  job.End(JobState::kCancelled,
          "cancelled: the hvdrun that submitted it attached went away " +
              Seconds(now.steady - job.unwatched_since) +
              " ago (submit with `hvdrun submit` for a job that outlives its client)",
          control::kCancelledExitCode, now);
  return true;
}

bool Supervisor::CheckStartTimeout(Job& job, Instant now) const {
  const auto timeout = OrDefault(job.status.spec.start_timeout_ms, options_.start_timeout);
  if (timeout.count() <= 0) return false;
  if (CheckFirstWorkers(job, timeout, now)) return true;
  // Workers an elastic job added later start at times of their own.
  return job.elastic() && CheckLateWorkers(job, timeout, now);
}

bool Supervisor::CheckFirstWorkers(Job& job, std::chrono::milliseconds timeout, Instant now) const {
  const int np = job.status.spec.np;
  if (job.start_timeout_waived || job.at_rendezvous >= np ||
      now.steady - job.attempt_started < timeout) {
    return false;
  }
  if (job.at_rendezvous == 0 && job.status.spec.start_timeout_ms < 0) {
    // Only the launcher's default applies and no rank called hvd.init(): a program without hvd
    // (a torch.distributed program written for torchrun) must not be killed for it. An hvd
    // program whose ranks all start late is still guarded: each rank's hvd.init() waits at most
    // HVD_START_TIMEOUT_SECONDS for the others and then fails naming the missing ones.
    job.start_timeout_waived = true;
    // What else watches hvd's own rendezvous and collectives is said to do nothing here.
    std::string moot;
    if (job.status.spec.stall_timeout_ms > 0) {
      moot +=
          "; --stall-timeout has no effect: it times hvd's collectives, and a stuck "
          "torch.distributed call is timed by init_process_group(timeout=...)";
    }
    if (job.elastic()) {
      moot +=
          "; --min-np/--max-np re-form workers that use hvd.elastic: without hvd the others "
          "would wait in their own collectives, so from now on a lost worker fails the job as "
          "in a fixed one, and the job does not grow";
    }
    job.log.AddProgress("no rank called hvd.init() within " + Seconds(timeout) +
                        ": supervising the job as a program that does not use hvd (no start "
                        "timeout; pass --start-timeout to enforce one)" +
                        moot);
    return false;
  }
  std::vector<int> missing;
  std::string details;
  JobFailure f;
  std::map<int, std::string> removals;  // elastic: the late workers that can be stopped
  int arrived = 0;
  std::vector<int> later_absent;  // elastic workers added later, not there yet
  int later_in_time = 0;          // ... of them, within their own time
  for (const RankStatus& r : job.status.ranks) {
    // A worker being removed is as good as gone: not waited for, not counted.
    if (job.BeingRemoved(r.placement.rank)) continue;
    arrived += r.rendezvous_time_ms != 0 && RankLive(r.state);
    if (r.placement.rank >= np && r.rendezvous_time_ms == 0 && RankLive(r.state)) {
      later_absent.push_back(r.placement.rank);
      later_in_time += OwnTimeOf(job, r.placement.rank, timeout, now) == OwnTime::kInTime;
    }
    // A rank that already ended is not waited for: its exit was reported (and judged) on its own.
    // Elastic workers added later are CheckLateWorkers'.
    if (r.rendezvous_time_ms != 0 || control::RankEnded(r.state) || r.placement.rank >= np) {
      continue;
    }
    const std::string who = "rank " + std::to_string(r.placement.rank) + " on " + r.placement.host;
    std::string why;
    if (r.state == RankState::kRunning) {
      why =
          "running as pid " + std::to_string(r.pid) + " but never called hvd.init() (hvd::Init())";
    } else if (r.state == RankState::kStarting) {
      why = "its agent " + r.placement.agent_id + " never reported it started";
    } else {
      why = "never sent to its agent";
    }
    if (missing.empty()) {
      f.rank = r.placement.rank;
      f.host = r.placement.host;
    }
    missing.push_back(r.placement.rank);
    if (missing.size() <= 8) details += "; " + who + ": " + why;
    // Only a running one: a rank its agent never reported started may never have reached it
    // (a StopRanks would find nothing there, and no end would ever come).
    if (r.state == RankState::kRunning) removals[r.placement.rank] = why;
  }
  if (missing.empty()) return false;
  const int min_np = job.status.spec.min_np;
  // An elastic job goes on without its late workers once --min-np met (every late one running:
  // one not known to run fails the job as before). Workers added later that may still come within
  // their own time may make --min-np: decided when they came or their time ran out.
  if (job.elastic() && arrived < min_np && arrived + later_in_time >= min_np &&
      removals.size() == missing.size()) {
    return false;
  }
  if (job.elastic() && arrived >= min_np && removals.size() == missing.size()) {
    for (auto& [rank, why] : removals) {
      why = "it did not reach hvd.init() within " + Seconds(timeout) + " (--start-timeout; " + why +
            ") while " + std::to_string(arrived) + " workers did; stopped by the launcher";
    }
    return job.RemoveWorkers(removals, "did not reach hvd.init() in time", now);
  }
  if (missing.size() > 8) details += "; and " + std::to_string(missing.size() - 8) + " more";
  if (!later_absent.empty()) {
    details += "; worker" + std::string(later_absent.size() == 1 ? " " : "s ") +
               RankList(later_absent, false) + ", added later, not there either";
  }
  f.message = RankList(missing) + " did not reach the rendezvous within " + Seconds(timeout) +
              " (--start-timeout)" + details +
              (arrived == 0 ? ". A program that does not use hvd needs --start-timeout 0" : "");
  job.Fail(f, control::kGenericFailureExitCode, now);
  return true;
}

bool Supervisor::CheckLateWorkers(Job& job, std::chrono::milliseconds timeout, Instant now) const {
  // Workers added before a launcher restart have no times (Job::WaitedSince: in memory only)
  // and are not judged; those added after it are.
  if (job.start_timeout_waived) return false;
  const auto& members = job.status.elastic.workers;
  const int np = job.status.spec.np;
  int met = 0;
  std::map<int, std::string> removals;
  for (const RankStatus& r : job.status.ranks) {
    if (!RankLive(r.state)) continue;
    if (r.rendezvous_time_ms != 0) {
      ++met;
      continue;
    }
    const int id = r.placement.rank;
    // Only a running one (as CheckFirstWorkers: a worker its agent never reported started may
    // never have reached it), added after the start, and a member of the current generation.
    if (id < np || r.state != RankState::kRunning ||
        OwnTimeOf(job, id, timeout, now) != OwnTime::kOverdue ||
        std::find(members.begin(), members.end(), id) == members.end()) {
      continue;
    }
    removals[id] = "it did not reach hvd.init() within " + Seconds(timeout) +
                   " of being added to the job (--start-timeout; running as pid " +
                   std::to_string(r.pid) +
                   " but never met the other workers); stopped by the "
                   "launcher";
  }
  if (removals.empty() || met == 0) return false;
  return job.RemoveWorkers(removals, "did not reach hvd.init() in time", now);
}

bool Supervisor::CheckLeftBeforeInit(Job& job, Instant now) const {
  // Elastic workers come and go, and later generations meet under keys of their own.
  const int np = job.status.spec.np;
  if (job.elastic() || job.rendezvous_restored || job.at_rendezvous == 0 ||
      job.at_rendezvous >= np) {
    return false;
  }
  std::vector<int> left, waiting;
  for (const RankStatus& r : job.status.ranks) {
    if (r.rendezvous_time_ms != 0) {
      if (!control::RankEnded(r.state)) waiting.push_back(r.placement.rank);
    } else if (r.state == RankState::kExited && r.exit_code == 0 && r.signal == 0) {
      left.push_back(r.placement.rank);
    }
  }
  if (left.empty() || waiting.empty()) return false;
  JobFailure f;
  f.rank = left[0];
  f.host = job.status.ranks[left[0]].placement.host;
  const bool one = left.size() == 1;
  f.message =
      (one ? "rank " + std::to_string(f.rank) + " on " + f.host
           : RankList(left) + " (rank " + std::to_string(f.rank) + " on " + f.host + ", ...)") +
      " exited with code 0 without calling hvd::Init(), while " + RankList(waiting) +
      (waiting.size() == 1 ? " waits" : " wait") + " for " + (one ? "it" : "them") +
      " at the rendezvous: every rank of a job calls hvd::Init(), or none does";
  job.Fail(f, control::kGenericFailureExitCode, now);
  return true;
}

bool Supervisor::CheckQueueTimeout(Job& job, Instant now) const {
  const int64_t timeout_ms = job.status.spec.queue_timeout_ms;
  // queued_since_ms is wall clock because it is part of the record (a restarted launcher resumes
  // the count); a job restored from before the field existed (0) starts counting now.
  if (timeout_ms <= 0) return false;
  // Placed, in the network check or the MASTER_PORT step: not waiting for slots (that time is
  // taken off the count if it falls back to waiting, Scheduler::GiveUp).
  if (job.placing) return false;
  if (job.status.queued_since_ms <= 0) job.status.queued_since_ms = now.wall_ms;
  const int64_t waited_ms = now.wall_ms - job.status.queued_since_ms;
  if (waited_ms < timeout_ms) return false;
  JobFailure f;
  f.message = "waited " + Seconds(std::chrono::milliseconds(waited_ms)) +
              " for slots (--queue-timeout " + Seconds(std::chrono::milliseconds(timeout_ms)) +
              "): " + job.status.reason;
  // Never restarted: waiting again would not help.
  job.Fail(f, control::kGenericFailureExitCode, now, /*permanent=*/true);
  return true;
}

Supervisor::Next Supervisor::CheckMasterPort(Job& job, Instant now, const AgentConnected& connected,
                                             const AgentBacklog& backlog) const {
  if (!job.placing) return Next::kNothing;
  Job::MasterPortAsk& ask = job.placing->master_port;
  if (ask.request_id.empty() || ask.port > 0 || !ask.error.empty()) return Next::kNothing;
  if (!connected(ask.agent_id)) {
    // Rank 0's agent went away after it was asked: its answer will never come, and that is no
    // silence to blame it for. Place the job again: elsewhere (asked afresh), back to waiting for
    // slots, or on the same agent once it is back.
    ask = Job::MasterPortAsk();
    return Next::kSchedule;
  }
  if (now.steady < ask.deadline) return Next::kNothing;
  // The answer may have come in time and wait behind other agents' reports (a busy launcher):
  // judge the agent once everything it sent before the deadline has been applied. Bounded: what
  // was read before the deadline is applied in order, however busy the launcher stays.
  if (backlog && backlog(ask.agent_id, ask.deadline)) return Next::kNothing;
  JobFailure f;
  f.host = ask.host;
  f.message = "rank 0's agent " + ask.agent_id + " on " + ask.host +
              " did not choose MASTER_PORT within " +
              base::SecondsText(options_.master_port_timeout) +
              " (stuck, or older than the launcher? update it, or pass -x MASTER_PORT=N)";
  ask = Job::MasterPortAsk();
  job.Fail(f, control::kGenericFailureExitCode, now);
  return Next::kSettle;
}

bool Supervisor::CheckStallTimeout(Job& job, Instant now) const {
  const int64_t timeout_ms = job.status.spec.stall_timeout_ms;
  if (timeout_ms <= 0 || job.stalls.empty()) return false;
  const std::map<int, launcherd::StallReport> reports = job.StallReportsAt(now.steady);
  const double oldest = OldestStall(reports);
  if (oldest * 1000 < static_cast<double>(timeout_ms)) return false;
  // The ranks the stall ends at (every other waits, directly or not, for them), as the record's
  // summary names them; the live ones are the stall's.
  const auto& ranks = job.status.ranks;
  const std::set<int> ends = StallCulprits(reports);
  std::set<int> culprits;
  for (int c : ends) {
    if (c >= 0 && c < static_cast<int>(ranks.size()) && RankLive(ranks[c].state)) {
      culprits.insert(c);
    }
  }
  const std::string what = "stalled for " + std::to_string(static_cast<int64_t>(oldest)) +
                           " s (--stall-timeout " + std::to_string(timeout_ms / 1000) +
                           " s): " + job.status.stall;
  if (job.elastic() && !ends.empty()) {
    // An elastic job goes on without the workers it stalls on: stopped, they close their links,
    // the others' collective fails and they re-form without them (docs/elastic.md). Those gone
    // already: the next generation, which clears the reports, is on its way.
    if (culprits.empty()) return false;
    switch (job.RemoveStalled(culprits, what + "; stopped by the launcher", now)) {
      case Job::StallRemoval::kStarted:
        return true;
      case Job::StallRemoval::kPending:
        return false;
      case Job::StallRemoval::kNo:
        break;
    }
  }
  JobFailure f;
  if (!ends.empty()) {
    f.rank = !culprits.empty() ? *culprits.begin() : *ends.begin();
  } else {  // the waits form no chain: the oldest report's first blamed rank, or its own
    const auto& [oldest_rank, report] = *std::max_element(
        reports.begin(), reports.end(),
        [](const auto& a, const auto& b) { return a.second.age_s < b.second.age_s; });
    f.rank = report.blamed.empty() ? oldest_rank : report.blamed[0];
  }
  if (f.rank >= 0 && f.rank < static_cast<int>(ranks.size())) {
    f.host = ranks[f.rank].placement.host;
  }
  f.stderr_tail = job.RunningRankTail(f.rank);
  f.message = what;
  job.Fail(f, control::kGenericFailureExitCode, now);
  return true;
}

void Supervisor::RankAtRendezvous(Job& job, int rank, Instant now) const {
  RankStatus& r = job.status.ranks[rank];
  if (r.rendezvous_time_ms != 0) return;
  r.rendezvous_time_ms = now.wall_ms;
  const int np = job.status.spec.np;
  if (rank >= np) {  // an elastic worker added later: not one of the rendezvous's np
    job.Changed(/*marker=*/false);
    return;
  }
  ++job.at_rendezvous;
  if (job.at_rendezvous == np) {
    job.log.AddProgress("rendezvous complete: " + std::to_string(np) + "/" + std::to_string(np) +
                        " ranks met");
  } else if (job.at_rendezvous % std::max(1, np / 20) == 0) {
    job.log.AddProgress("ranks at the rendezvous " + std::to_string(job.at_rendezvous) + "/" +
                        std::to_string(np));
  }
  job.Changed(/*marker=*/false);
}

void Supervisor::StallReport(Job& job, int rank, const std::string& value, Instant now) const {
  if (value.empty()) {
    if (job.stalls.erase(rank) == 0) return;
  } else {
    launcherd::StallReport report;
    if (!ParseStallReport(value, &report)) {
      HVD_LOG(WARNING) << "job " << job.id() << ": rank " << rank
                       << " wrote a malformed stall report; ignored";
      return;
    }
    // An elastic worker's wait that began before the newest generation was published is one of
    // a generation that ended (its reporter may write once more before it is gone): the new
    // generation cleared the reports, and this one would be timed from the old wait.
    const double since_generation =
        std::chrono::duration<double>(now.steady - job.generation_published()).count();
    if (job.elastic() && report.age_s > since_generation + 1.0) return;
    job.stalls[rank] = {std::move(report), now.steady};
  }
  const std::map<int, launcherd::StallReport> reports = job.StallReportsAt(now.steady);
  const double oldest = OldestStall(reports);
  const auto& ranks = job.status.ranks;
  const std::string summary = SummarizeStalls(reports, [&ranks](int r) {
    return r < static_cast<int>(ranks.size()) ? ranks[r].placement.host : std::string("?");
  });
  if (summary == job.status.stall) return;
  if (!summary.empty()) {
    HVD_LOG(WARNING) << "job " << job.id() << " stalled: " << control::LogEscape(summary, 1024);
  } else {
    HVD_LOG(INFO) << "job " << job.id() << " is making progress again";
    job.stacks_asked.clear();
  }
  job.status.stall = summary;
  job.status.stall_since_ms =
      summary.empty() ? 0 : now.wall_ms - static_cast<int64_t>(oldest * 1000);
  job.Changed(/*marker=*/true);  // watchers (hvdrun) print it
  if (summary.empty()) return;
  // Where the ranks the stall ends at are: their stacks, once per stall (JobManager sends the
  // commands), said after the stall itself.
  job.AskForStacks(StallCulprits(reports), summary, /*once_per_stall=*/true);
  job.Changed(/*marker=*/false);  // watchers read the note
}

void Supervisor::WatchEnded(Job& job, Instant now) const {
  if (job.watchers == 0) return;
  if (--job.watchers == 0) job.unwatched_since = now.steady;
}

}  // namespace hvd::launcherd
