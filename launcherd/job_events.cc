// JobManager: what agents report (rank events, output, heartbeats, loss) and the state changes
// they cause: the first failure, teardown (StopJob) and cleanup once every rank is gone.
#include <algorithm>

#include "common/logging.h"
#include "launcherd/job_manager.h"

namespace hvd::launcherd {
namespace {

// FAILED_TO_START: like a shell that cannot run the command.
constexpr int kFailedToStartExitCode = 127;
// Longer lines are cut so one runaway line cannot take the output log's whole byte budget.
constexpr size_t kMaxLineBytes = 16 << 10;

bool Live(RankState s) {
  return s == RankState::kStarting || s == RankState::kRunning;
}

}  // namespace

void JobManager::ChangedLocked(Job& job, bool marker) {
  ++job.version;
  if (marker) job.log.AddStatus(job.status, job.version);
  job.cv.notify_all();
}

void JobManager::SetStateLocked(Job& job, JobState to, const std::string& reason) {
  Status s = control::CheckTransition(job.status.state, to);
  if (!s.ok()) {
    HVD_LOG(ERROR) << "job " << job.status.id << ": " << s.message() << " (ignored; a bug)";
    return;
  }
  job.status.state = to;
  job.status.reason = reason;
  ChangedLocked(job, /*marker=*/true);
}

void JobManager::EndLocked(Job& job, JobState to, const std::string& reason, int exit_code) {
  if (control::IsTerminal(job.status.state)) return;
  // Every rank may exit 0 before the last RUNNING report was processed.
  if (to == JobState::kSucceeded && job.status.state == JobState::kStarting) {
    SetStateLocked(job, JobState::kRunning, "all ranks started");
  }
  job.status.exit_code = exit_code;
  job.status.end_time_ms = NowMs();
  job.ended_at = Clock::now();
  SetStateLocked(job, to, reason);
  HVD_LOG(INFO) << "job " << job.status.id << " " << control::JobStateName(to) << ": " << reason;
  if (to != JobState::kSucceeded) StopAgentsLocked(job, reason);
  RankEndedLocked(job);
}

void JobManager::FailLocked(Job& job, const JobFailure& failure, int exit_code) {
  if (control::IsTerminal(job.status.state)) return;  // the first failure is the cause
  job.status.has_failure = true;
  job.status.failure = failure;
  EndLocked(job, JobState::kFailed, failure.message, exit_code);
}

void JobManager::StopAgentsLocked(Job& job, const std::string& reason) {
  std::set<std::string> agents;
  for (const RankStatus& r : job.status.ranks) {
    if (Live(r.state)) agents.insert(r.placement.agent_id);
  }
  for (const std::string& id : agents) {
    StopJobCommand cmd{job.status.id, reason, options_.kill_grace.count()};
    std::shared_ptr<AgentLink> link = agents_->Link(id);
    // A disconnected agent gets it when it reconnects and lists the job (OnHeartbeat).
    if (link && link->SendStopJob(cmd)) job.stop_sent.insert(id);
  }
}

void JobManager::RankEndedLocked(Job& job) {
  if (!job.finished && control::IsTerminal(job.status.state)) {
    bool any_live = false;
    for (const RankStatus& r : job.status.ranks) any_live |= Live(r.state);
    if (!any_live) {
      job.finished = true;
      store_->EraseScope("job/" + job.status.id + "/");
      {
        std::lock_guard<std::mutex> lock(secrets_mu_);
        secrets_.erase(job.status.id);
      }
      ChangedLocked(job, /*marker=*/true);
      finished_cv_.notify_all();
      PruneLocked();
    }
  }
  ScheduleLocked();  // slots may have freed up
}

void JobManager::OnRankEvent(const std::string& agent_id, const RankEventReport& ev) {
  std::lock_guard<std::mutex> lock(mu_);
  JobPtr job_ptr = FindLocked(ev.job_id);
  if (!job_ptr || ev.attempt != job_ptr->status.attempt) {
    HVD_LOG(DEBUG) << "agent " << agent_id << ": event for unknown job " << ev.job_id << " attempt "
                   << ev.attempt << " ignored";
    return;
  }
  Job& job = *job_ptr;
  auto& ranks = job.status.ranks;
  if (ev.rank < 0 || ev.rank >= static_cast<int>(ranks.size()) ||
      ranks[ev.rank].placement.agent_id != agent_id) {
    HVD_LOG(WARNING) << "agent " << agent_id << " reported rank " << ev.rank << " of job "
                     << ev.job_id << ", which is not placed there; ignored";
    return;
  }
  RankStatus& r = ranks[ev.rank];
  if (control::RankEnded(r.state)) return;  // late or repeated
  const bool terminal = control::IsTerminal(job.status.state);
  const int np = job.status.spec.np;
  // An exit reported before any RUNNING (a very short process) still counts as a start.
  if (ev.state == RankState::kRunning ||
      (ev.state == RankState::kExited && r.state != RankState::kRunning)) {
    if (r.state != RankState::kRunning) {
      r.state = RankState::kRunning;
      r.start_time_ms = NowMs();
      ++job.ranks_started;
      // For humans: about 20 steps whatever np is, always ending with N/N.
      const int step = std::max(1, np / 20);
      if (!terminal && (job.ranks_started == np || job.ranks_started % step == 0)) {
        job.log.AddProgress("ranks started " + std::to_string(job.ranks_started) + "/" +
                            std::to_string(np));
      }
    }
    if (ev.pid) r.pid = ev.pid;
    if (job.status.state == JobState::kStarting && job.ranks_started == np) {
      SetStateLocked(job, JobState::kRunning,
                     "all " + std::to_string(np) + " rank" + (np == 1 ? "" : "s") + " running");
    }
    ChangedLocked(job, /*marker=*/false);
    if (ev.state == RankState::kRunning) return;
  }
  if (!control::RankEnded(ev.state)) {
    HVD_LOG(WARNING) << "agent " << agent_id << " sent rank state "
                     << control::RankStateName(ev.state) << "; ignored";
    return;
  }
  r.state = ev.state;
  if (ev.pid) r.pid = ev.pid;
  r.exit_code = ev.exit_code;
  r.signal = ev.signal;
  r.error = ev.error;
  r.end_time_ms = NowMs();
  if (!r.start_time_ms) r.start_time_ms = r.end_time_ms;
  ChangedLocked(job, /*marker=*/false);

  JobFailure f;
  f.rank = ev.rank;
  f.host = r.placement.host;
  f.exit_code = ev.exit_code;
  f.signal = ev.signal;
  f.stderr_tail = ev.stderr_tail;
  if (ev.state == RankState::kExited && ev.exit_code == 0 && ev.signal == 0) {
    bool all_zero = true;
    for (const RankStatus& q : ranks) {
      all_zero &= q.state == RankState::kExited && q.exit_code == 0 && q.signal == 0;
    }
    if (all_zero) {
      EndLocked(
          job, JobState::kSucceeded,
          "all " + std::to_string(np) + " rank" + (np == 1 ? "" : "s") + " exited with code 0", 0);
    }
  } else if (ev.state == RankState::kExited) {
    f.message = control::DescribeRankExit(ev.rank, f.host, ev.exit_code, ev.signal);
    FailLocked(job, f, control::ExitCodeFor(ev.exit_code, ev.signal));
  } else if (ev.state == RankState::kFailedToStart) {
    f.message = "rank " + std::to_string(ev.rank) + " on " + f.host +
                " failed to start: " + (ev.error.empty() ? "no reason given" : ev.error);
    FailLocked(job, f, kFailedToStartExitCode);
  } else {  // kKilled while the job was not being torn down: its agent ended it
    f.message = "rank " + std::to_string(ev.rank) + " on " + f.host + " was killed by its agent" +
                (ev.error.empty() ? "" : ": " + ev.error);
    FailLocked(job, f,
               ev.signal ? control::ExitCodeFor(0, ev.signal) : control::kGenericFailureExitCode);
  }
  RankEndedLocked(job);
}

void JobManager::OnOutput(const std::string& agent_id, const std::string& job_id,
                          std::vector<OutputLine> lines) {
  std::lock_guard<std::mutex> lock(mu_);
  JobPtr job = FindLocked(job_id);
  if (!job) return;
  const auto& ranks = job->status.ranks;
  bool added = false;
  for (OutputLine& line : lines) {
    // Only the agent running a rank speaks for it.
    if (line.rank < 0 || line.rank >= static_cast<int>(ranks.size()) ||
        ranks[line.rank].placement.agent_id != agent_id) {
      continue;
    }
    if (line.text.size() > kMaxLineBytes) {
      line.text.resize(kMaxLineBytes);
      line.text += " [line cut at 16 KiB]";
    }
    job->log.AddOutput(std::move(line));
    added = true;
  }
  if (added) job->cv.notify_all();
}

void JobManager::OnHeartbeat(const std::string& agent_id,
                             const std::vector<std::string>& running_jobs) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto now = Clock::now();
  std::set<std::string> running(running_jobs.begin(), running_jobs.end());
  std::shared_ptr<AgentLink> link = agents_->Link(agent_id);
  for (const std::string& id : running) {
    JobPtr job = FindLocked(id);
    // The agent runs a job this launcher knows nothing of (it restarted, or forgot the job).
    if (!job) {
      if (link) {
        link->SendStopJob({id, "the launcher does not know this job", options_.kill_grace.count()});
      }
      continue;
    }
    if (!control::IsTerminal(job->status.state)) continue;
    const bool overdue = now - job->ended_at > options_.reconcile_after;
    if (link && (!job->stop_sent.count(agent_id) || overdue)) {
      link->SendStopJob({id, job->status.reason, options_.kill_grace.count()});
      job->stop_sent.insert(agent_id);
    }
  }
  // The reverse: an ended job whose ranks here were never reported gone, though the agent no
  // longer runs it. Waiting past reconcile_after avoids racing StartRank/StopJob still in flight.
  std::vector<JobPtr> jobs = jobs_;
  for (const JobPtr& job : jobs) {
    if (job->finished || !control::IsTerminal(job->status.state) || running.count(job->status.id) ||
        now - job->ended_at <= options_.reconcile_after) {
      continue;
    }
    bool changed = false;
    for (RankStatus& r : job->status.ranks) {
      if (r.placement.agent_id != agent_id || !Live(r.state)) continue;
      r.state = RankState::kKilled;
      r.error = "its agent no longer runs it";
      r.end_time_ms = NowMs();
      changed = true;
    }
    if (changed) {
      ChangedLocked(*job, /*marker=*/false);
      RankEndedLocked(*job);
    }
  }
}

void JobManager::OnAgentLost(const AgentInfo& agent) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string cause = "agent on " + agent.host + " lost";
  std::vector<JobPtr> jobs = jobs_;
  for (const JobPtr& job : jobs) {
    if (job->finished) continue;
    std::string lost;
    int first = -1;
    for (RankStatus& r : job->status.ranks) {
      if (r.placement.agent_id != agent.id || !Live(r.state)) continue;
      r.state = RankState::kKilled;
      r.error = cause;
      r.end_time_ms = NowMs();
      if (first < 0) first = r.placement.rank;
      lost += (lost.empty() ? "" : ", ") + std::to_string(r.placement.rank);
    }
    if (first < 0) continue;
    ChangedLocked(*job, /*marker=*/false);
    JobFailure f;
    f.rank = first;
    f.host = agent.host;
    f.message = cause + " (agent " + agent.id + " stopped sending heartbeats); rank" +
                (lost.find(',') == std::string::npos ? " " : "s ") + lost + " ran there";
    FailLocked(*job, f, control::kGenericFailureExitCode);
    RankEndedLocked(*job);
  }
}

}  // namespace hvd::launcherd
