// JobManager: what keeps a job from hanging silently. Tick() runs the timers; the rendezvous store
// tells it which ranks arrived and what the runtime reports as stalled.
//   - start timeout: every rank of the attempt must reach the rendezvous (hvd::Init writes
//     job/<id>/attempt/<n>/host/<rank>) within it, or the job fails naming each missing rank, its
//     host and what its agent last said of it;
//   - stall timeout: the runtime's stall reports (job/<id>/attempt/<n>/stall/<rank>) are shown in
//     the record at once, and fail the job once the oldest has lasted this long;
//   - attached client: a job not submitted detached is cancelled once no attached watcher has
//     been connected for the client lease (hvdrun was killed, or its host died);
//   - restarts: a RESTARTING job whose back-off has passed starts its next attempt;
//   - queue timeout: a job still PENDING (waiting for slots) past its --queue-timeout fails with
//     what it was waiting for;
//   - causes: a failure its rank's runtime blamed on a peer (abort/<rank>) is held up to
//     cause_settle for the failure it is a consequence of.
#include <cstdio>
#include <cstdlib>

#include "common/logging.h"
#include "control/log_escape.h"
#include "launcherd/job_manager.h"

namespace hvd::launcherd {
namespace {

// "job/<id>/attempt/<n>/<kind>/<rank>" -> its parts; false for any other key (the re-Init keys
// under init/<k>/ included: only the first meeting of a process counts).
bool ParseRankKey(const std::string& key, std::string* id, int* attempt, std::string* kind,
                  int* rank) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    const size_t slash = key.find('/', start);
    parts.push_back(key.substr(start, slash == std::string::npos ? slash : slash - start));
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  if (parts.size() != 6 || parts[0] != "job" || parts[2] != "attempt") return false;
  char* end = nullptr;
  const long a = std::strtol(parts[3].c_str(), &end, 10);
  if (parts[3].empty() || *end != '\0' || a < 0) return false;
  const long r = std::strtol(parts[5].c_str(), &end, 10);
  if (parts[5].empty() || *end != '\0' || r < 0) return false;
  *id = parts[1];
  *attempt = static_cast<int>(a);
  *kind = parts[4];
  *rank = static_cast<int>(r);
  return true;
}

// "45 s"; below 10 s with a tenth: "0.2 s".
std::string Seconds(std::chrono::steady_clock::duration d) {
  const double s = std::chrono::duration<double>(d).count();
  char buf[32];
  std::snprintf(buf, sizeof buf, s < 10 ? "%.1f s" : "%.0f s", s);
  return buf;
}

}  // namespace

void JobManager::OnRendezvousKey(const std::string& key, const std::string& value) {
  std::string id, kind;
  int attempt = 0, rank = 0;
  if (!ParseRankKey(key, &id, &attempt, &kind, &rank) ||
      (kind != "host" && kind != "stall" && kind != "abort")) {
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  JobPtr job = FindLocked(id);
  if (!job || job->status.attempt != attempt ||
      rank >= static_cast<int>(job->status.ranks.size()) ||
      control::IsTerminal(job->status.state)) {
    return;
  }
  if (kind == "host") {
    RankAtRendezvousLocked(*job, rank);
  } else if (kind == "stall") {
    StallReportLocked(*job, rank, value);
  } else {
    job->peer_failed.insert(rank);  // its coming failure is a consequence of another's
  }
}

void JobManager::RankAtRendezvousLocked(Job& job, int rank) {
  RankStatus& r = job.status.ranks[rank];
  if (r.rendezvous_time_ms != 0) return;
  r.rendezvous_time_ms = NowMs();
  const int np = job.status.spec.np;
  ++job.at_rendezvous;
  if (job.at_rendezvous == np) {
    job.log.AddProgress("rendezvous complete: " + std::to_string(np) + "/" + std::to_string(np) +
                        " ranks met");
  } else if (job.at_rendezvous % std::max(1, np / 20) == 0) {
    job.log.AddProgress("ranks at the rendezvous " + std::to_string(job.at_rendezvous) + "/" +
                        std::to_string(np));
  }
  ChangedLocked(job, /*marker=*/false);
}

void JobManager::StallReportLocked(Job& job, int rank, const std::string& value) {
  if (value.empty()) {
    if (job.stalls.erase(rank) == 0) return;
  } else {
    StallReport report;
    if (!ParseStallReport(value, &report)) {
      HVD_LOG(WARNING) << "job " << job.status.id << ": rank " << rank
                       << " wrote a malformed stall report; ignored";
      return;
    }
    job.stalls[rank] = {std::move(report), Clock::now()};
  }
  std::map<int, StallReport> reports;
  double oldest = 0;
  const auto now = Clock::now();
  for (const auto& [r, s] : job.stalls) {
    reports[r] = s.report;
    reports[r].age_s += std::chrono::duration<double>(now - s.received).count();
    oldest = std::max(oldest, reports[r].age_s);
  }
  const auto& ranks = job.status.ranks;
  const std::string summary = SummarizeStalls(reports, [&ranks](int r) {
    return r < static_cast<int>(ranks.size()) ? ranks[r].placement.host : std::string("?");
  });
  if (summary == job.status.stall) return;
  if (!summary.empty()) {
    HVD_LOG(WARNING) << "job " << job.status.id
                     << " stalled: " << control::LogEscape(summary, 1024);
  } else {
    HVD_LOG(INFO) << "job " << job.status.id << " is making progress again";
  }
  job.status.stall = summary;
  job.status.stall_since_ms = summary.empty() ? 0 : NowMs() - static_cast<int64_t>(oldest * 1000);
  ChangedLocked(job, /*marker=*/true);  // watchers (hvdrun) print it
}

void JobManager::WatchStarted(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (JobPtr job = FindLocked(id)) ++job->watchers;
}

void JobManager::WatchEnded(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  JobPtr job = FindLocked(id);
  if (!job || job->watchers == 0) return;
  if (--job->watchers == 0) job->unwatched_since = Clock::now();
}

void JobManager::Tick() {
  std::lock_guard<std::mutex> lock(mu_);
  const auto now = Clock::now();
  std::vector<JobPtr> jobs = jobs_;  // failing a job may prune the table
  for (const JobPtr& job : jobs) {
    const JobState state = job->status.state;
    if (control::IsTerminal(state)) continue;
    if (!job->status.spec.detached && job->watchers == 0 &&
        now - job->unwatched_since > options_.client_lease) {
      EndLocked(*job, JobState::kCancelled,
                "cancelled: the hvdrun that submitted it attached went away " +
                    Seconds(now - job->unwatched_since) +
                    " ago (submit with `hvdrun submit` for a job that outlives its client)",
                control::kCancelledExitCode);
      continue;
    }
    if (state == JobState::kRestarting) {
      RankEndedLocked(*job);  // starts the next attempt once the back-off has passed
      continue;
    }
    if (job->held && now >= job->settle_at) {
      ReleaseHeldLocked(*job);  // the failure it blamed never came: it is the cause after all
      continue;
    }
    if (state == JobState::kPending) {
      CheckQueueTimeoutLocked(*job);
      if (job->status.state == JobState::kPending) CheckMasterPortLocked(*job, now);
      continue;
    }
    if (state == JobState::kStarting || state == JobState::kRunning) {
      CheckStartTimeoutLocked(*job, now);
      if (!control::IsTerminal(job->status.state)) CheckStallTimeoutLocked(*job, now);
    }
  }
}

void JobManager::CheckStartTimeoutLocked(Job& job, Clock::time_point now) {
  const auto timeout = OrDefault(job.status.spec.start_timeout_ms, options_.start_timeout);
  if (timeout.count() <= 0 || job.start_timeout_waived || job.at_rendezvous >= job.status.spec.np ||
      now - job.attempt_started < timeout) {
    return;
  }
  if (job.at_rendezvous == 0 && job.status.spec.start_timeout_ms < 0) {
    // Only the launcher's default applies and no rank called hvd.init(): a program without hvd
    // (a torch.distributed program written for torchrun) must not be killed for it. An hvd
    // program whose ranks all start late is still guarded: each rank's hvd.init() waits at most
    // HVD_START_TIMEOUT_SECONDS for the others and then fails naming the missing ones.
    job.start_timeout_waived = true;
    job.log.AddProgress("no rank called hvd.init() within " + Seconds(timeout) +
                        ": supervising the job as a program that does not use hvd (no start "
                        "timeout; pass --start-timeout to enforce one)");
    return;
  }
  std::vector<int> missing;
  std::string details;
  JobFailure f;
  for (const RankStatus& r : job.status.ranks) {
    // A rank that already ended is not waited for: its exit was reported (and judged) on its own.
    if (r.rendezvous_time_ms != 0 || control::RankEnded(r.state)) continue;
    const std::string who = "rank " + std::to_string(r.placement.rank) + " on " + r.placement.host;
    std::string why;
    if (r.state == RankState::kRunning) {
      why = "running as pid " + std::to_string(r.pid) + " but never called hvd::Init()";
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
  }
  if (missing.empty()) return;
  if (missing.size() > 8) details += "; and " + std::to_string(missing.size() - 8) + " more";
  f.message = RankList(missing) + " did not reach the rendezvous within " + Seconds(timeout) +
              " (--start-timeout)" + details +
              ". A program that does not use hvd needs --start-timeout 0";
  FailLocked(job, f, control::kGenericFailureExitCode);
}

void JobManager::CheckQueueTimeoutLocked(Job& job) {
  const int64_t timeout_ms = job.status.spec.queue_timeout_ms;
  // queued_since_ms is wall clock because it is part of the record (a restarted launcher resumes
  // the count); a job restored from before the field existed (0) starts counting now.
  if (timeout_ms <= 0) return;
  // Placed, in the network check or the MASTER_PORT step: not waiting for slots (that time is
  // taken off the count if it falls back to waiting, job_manager.cc).
  if (job.placed_since_ms > 0) return;
  if (job.status.queued_since_ms <= 0) job.status.queued_since_ms = NowMs();
  const int64_t waited_ms = NowMs() - job.status.queued_since_ms;
  if (waited_ms < timeout_ms) return;
  JobFailure f;
  f.message = "waited " + Seconds(std::chrono::milliseconds(waited_ms)) +
              " for slots (--queue-timeout " + Seconds(std::chrono::milliseconds(timeout_ms)) +
              "): " + job.status.reason;
  FailLocked(job, f, control::kGenericFailureExitCode, /*permanent=*/true);
}

void JobManager::CheckStallTimeoutLocked(Job& job, Clock::time_point now) {
  const int64_t timeout_ms = job.status.spec.stall_timeout_ms;
  if (timeout_ms <= 0 || job.stalls.empty()) return;
  double oldest = 0;
  int oldest_rank = 0;
  for (const auto& [rank, s] : job.stalls) {
    const double age = s.report.age_s + std::chrono::duration<double>(now - s.received).count();
    if (age > oldest) {
      oldest = age;
      oldest_rank = rank;
    }
  }
  if (oldest * 1000 < static_cast<double>(timeout_ms)) return;
  JobFailure f;
  const StallReport& report = job.stalls[oldest_rank].report;
  f.rank = report.blamed.empty() ? oldest_rank : report.blamed[0];
  if (f.rank < static_cast<int>(job.status.ranks.size())) {
    f.host = job.status.ranks[f.rank].placement.host;
  }
  f.message = "stalled for " + std::to_string(static_cast<int64_t>(oldest)) +
              " s (--stall-timeout " + std::to_string(timeout_ms / 1000) +
              " s): " + job.status.stall;
  FailLocked(job, f, control::kGenericFailureExitCode);
}

}  // namespace hvd::launcherd
