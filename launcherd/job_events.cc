// JobManager: what agents report (rank events, output, heartbeats, loss) and the state changes
// they cause: the first failure, teardown (StopJob) and cleanup once every rank is gone.
#include <algorithm>

#include "common/logging.h"
#include "control/log_escape.h"
#include "launcherd/job_manager.h"

namespace hvd::launcherd {
namespace {

// FAILED_TO_START: like a shell that cannot run the command.
constexpr int kFailedToStartExitCode = 127;
// Longer lines are cut so one runaway line cannot take the output log's whole byte budget.
constexpr size_t kMaxLineBytes = 16 << 10;

}  // namespace

void JobManager::ChangedLocked(Job& job, bool marker) {
  ++job.version;
  if (marker) job.log.AddStatus(job.status, job.version);
  PersistLocked(job);
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
  HVD_LOG(INFO) << "job " << job.status.id << " " << control::JobStateName(to) << ": "
                << control::LogEscape(reason, 1024);
  if (to != JobState::kSucceeded) StopAgentsLocked(job, reason);
  RankEndedLocked(job);
}

void JobManager::FailLocked(Job& job, const JobFailure& failure, int exit_code, bool permanent) {
  // The first failure is the cause; while restarting, the attempt's later failures are its echo.
  if (control::IsTerminal(job.status.state) || job.status.state == JobState::kRestarting) return;
  control::RestartPolicy policy = options_.restart;
  policy.max_restarts = job.status.spec.max_restarts;
  const control::RestartDecision d = control::DecideRestart(policy, job.status.attempt, permanent);
  if (d.restart) {
    RestartLocked(job, failure, d);
    return;
  }
  job.status.has_failure = true;
  job.status.failure = failure;
  EndLocked(job, JobState::kFailed,
            failure.message +
                (d.text.empty() || job.status.attempt == 0
                     ? ""
                     : " (attempt " + std::to_string(job.status.attempt + 1) + "; " + d.text + ")"),
            exit_code);
}

void JobManager::RestartLocked(Job& job, const JobFailure& failure,
                               const control::RestartDecision& d) {
  job.status.previous_failures.push_back(failure);
  job.restart_at = Clock::now() + d.delay;
  const std::string reason = "attempt " + std::to_string(job.status.attempt + 1) +
                             " failed: " + failure.message + "; " + d.text;
  SetStateLocked(job, JobState::kRestarting, reason);
  HVD_LOG(INFO) << "job " << job.status.id << ": " << control::LogEscape(reason, 1024);
  job.log.AddProgress("restarting: " + d.text);
  StopAgentsLocked(job, "restarting the job after: " + failure.message);
  RankEndedLocked(job);  // with nothing left running, the next attempt starts now
}

void JobManager::NextAttemptLocked(Job& job) {
  store_->EraseScope("job/" + job.status.id + "/attempt/" + std::to_string(job.status.attempt) +
                     "/");
  ++job.status.attempt;
  job.status.ranks.clear();
  job.status.start_time_ms = 0;
  job.status.stall.clear();
  job.status.stall_since_ms = 0;
  job.stalls.clear();
  job.ranks_started = 0;
  job.at_rendezvous = 0;
  job.start_timeout_waived = false;
  job.agents_ready.clear();
  job.stop_sent.clear();
  job.peer_failed.clear();
  job.dropped_agents.clear();
  job.held.reset();
  job.cause_time_ms = 0;
  job.cause_secondary = false;
  job.status.queued_since_ms = NowMs();  // --queue-timeout counts each wait for slots afresh
  job.placed_since_ms = 0;               // a placement of the failed attempt is no more
  job.master_port = Job::MasterPortAsk();
  SetStateLocked(job, JobState::kPending,
                 "attempt " + std::to_string(job.status.attempt + 1) + " of " +
                     std::to_string(job.status.spec.max_restarts + 1) + ": waiting for placement");
  ScheduleLocked();
}

void JobManager::StopAgentsLocked(Job& job, const std::string& reason) {
  std::set<std::string> agents;
  for (const RankStatus& r : job.status.ranks) {
    if (RankLive(r.state)) agents.insert(r.placement.agent_id);
  }
  for (const std::string& id : agents) {
    StopJobCommand cmd{job.status.id, reason, KillGrace(job).count(), job.stop_signal};
    std::shared_ptr<AgentLink> link = agents_->Link(id);
    // A disconnected agent gets it when it reconnects and lists the job (OnHeartbeat).
    if (link && link->SendStopJob(cmd)) job.stop_sent.insert(id);
  }
}

void JobManager::RankFailedLocked(Job& job, const JobFailure& f, int exit_code, int64_t time_ms) {
  // A rank that dies while an agent of its job is out of touch most likely died because its peers
  // there vanished: the agent is the cause, not this rank (issue 20, finding 9).
  JobFailure gone;
  if (!control::IsTerminal(job.status.state) && job.status.state != JobState::kRestarting &&
      AgentGoneCauseLocked(job, "", &gone)) {
    job.held.reset();
    FailLocked(job, gone, control::kGenericFailureExitCode);
    job.cause_time_ms = 0;  // never replaced by a rank's exit
    job.cause_secondary = false;
    return;
  }
  const bool secondary = job.peer_failed.count(f.rank) > 0;
  // Which of two rank failures is the cause: one that blamed no peer, then the earlier death.
  auto better = [&](bool other_secondary, int64_t other_time) {
    if (secondary != other_secondary) return !secondary;
    return time_ms > 0 && other_time > 0 && time_ms < other_time;
  };
  if (job.status.state == JobState::kFailed && job.status.has_failure && job.cause_time_ms > 0) {
    if (!job.finished && better(job.cause_secondary, job.cause_time_ms)) {
      job.status.failure = f;
      job.status.exit_code = exit_code;
      job.status.reason = f.message;
      job.cause_time_ms = time_ms;
      job.cause_secondary = secondary;
      job.cause_set_at = Clock::now();
      ChangedLocked(job, /*marker=*/true);
    }
    return;
  }
  if (control::IsTerminal(job.status.state) || job.status.state == JobState::kRestarting) return;
  if (secondary) {
    // It failed because of a peer: wait a moment for that peer's own failure.
    if (!job.held || better(true, job.held->time_ms)) {
      if (!job.held) job.settle_at = Clock::now() + options_.cause_settle;
      job.held = Job::HeldFailure{f, exit_code, time_ms};
    }
    return;  // released by ReleaseHeldLocked: a better failure, every rank gone, or Tick()
  }
  job.held.reset();
  FailLocked(job, f, exit_code);
  job.cause_time_ms = time_ms;
  job.cause_secondary = false;
  job.cause_set_at = Clock::now();
}

void JobManager::ReleaseHeldLocked(Job& job) {
  if (!job.held) return;
  const Job::HeldFailure h = *job.held;
  job.held.reset();
  FailLocked(job, h.failure, h.exit_code);
  job.cause_time_ms = h.time_ms;
  job.cause_secondary = true;
  job.cause_set_at = Clock::now();
}

void JobManager::RankEndedLocked(Job& job) {
  // A held failure has nothing more to wait for once every rank is gone.
  if (job.held && !AnyRankLive(job.status)) ReleaseHeldLocked(job);
  if (job.status.state == JobState::kRestarting && Clock::now() >= job.restart_at &&
      !AnyRankLive(job.status)) {
    NextAttemptLocked(job);  // until then, Tick() retries
  }
  if (!job.finished && control::IsTerminal(job.status.state)) {
    if (!AnyRankLive(job.status)) {
      job.finished = true;
      // The secret first: the rendezvous server checks it before every request, so nothing can
      // write a key of this job after its keys are erased.
      {
        std::lock_guard<std::mutex> lock(secrets_mu_);
        secrets_.erase(job.status.id);
      }
      store_->EraseScope("job/" + job.status.id + "/");
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
  r.end_time_ms = ev.time_ms > 0 ? ev.time_ms : NowMs();
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
    RankFailedLocked(job, f, control::ExitCodeFor(ev.exit_code, ev.signal), r.end_time_ms);
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
  ReconcileUnconfirmedLocked(agent_id, running);
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
      link->SendStopJob({id, job->status.reason, KillGrace(*job).count()});
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
    if (!KillRanksOnAgentLocked(*job, agent_id, "its agent no longer runs it").empty()) {
      RankEndedLocked(*job);
    }
  }
}

std::vector<int> JobManager::KillRanksOnAgentLocked(Job& job, const std::string& agent_id,
                                                    const std::string& error) {
  std::vector<int> killed;
  for (RankStatus& r : job.status.ranks) {
    if (r.placement.agent_id != agent_id || !RankLive(r.state)) continue;
    r.state = RankState::kKilled;
    r.error = error;
    r.end_time_ms = NowMs();
    killed.push_back(r.placement.rank);
  }
  if (!killed.empty()) ChangedLocked(job, /*marker=*/false);
  return killed;
}

void JobManager::OnAgentLost(const AgentInfo& agent) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string cause = "agent on " + agent.host + " lost";
  std::vector<JobPtr> jobs = jobs_;
  for (const JobPtr& job : jobs) {
    if (job->finished) continue;
    const std::vector<int> lost = KillRanksOnAgentLocked(*job, agent.id, cause);
    if (lost.empty()) continue;
    JobFailure f;
    f.rank = lost[0];
    f.host = agent.host;
    f.message = cause + " (agent " + agent.id + " stopped sending heartbeats); " + RankList(lost) +
                " ran there";
    FailLocked(*job, f, control::kGenericFailureExitCode);
    RankEndedLocked(*job);
  }
}

bool JobManager::AgentGoneCauseLocked(const Job& job, const std::string& only_agent,
                                      JobFailure* f) {
  // The job's live ranks by agent, in rank order; then the first agent whose stream is down.
  std::map<std::string, std::vector<int>> by_agent;
  std::vector<std::string> order;
  for (const RankStatus& r : job.status.ranks) {
    if (!RankLive(r.state)) continue;
    if (!only_agent.empty() ? r.placement.agent_id != only_agent
                            : !job.dropped_agents.count(r.placement.agent_id)) {
      continue;
    }
    std::vector<int>& ranks = by_agent[r.placement.agent_id];
    if (ranks.empty()) order.push_back(r.placement.agent_id);
    ranks.push_back(r.placement.rank);
  }
  for (const std::string& id : order) {
    if (agents_->Link(id) != nullptr) continue;
    std::vector<int> ranks = by_agent[id];
    const size_t n = ranks.size();
    if (n > 8) ranks.resize(8);  // one line whatever np is
    const std::string& host = job.status.ranks[ranks[0]].placement.host;
    f->rank = ranks[0];
    f->host = host;
    f->exit_code = 0;
    f->signal = 0;
    f->stderr_tail.clear();
    f->message = "agent on " + host + " lost (agent " + id +
                 " dropped its connection to the launcher: it or its host went away); " +
                 RankList(ranks) +
                 (n > ranks.size() ? " and " + std::to_string(n - 8) + " more" : "") + " ran there";
    return true;
  }
  return false;
}

void JobManager::OnAgentDisconnected(const std::string& agent_id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (shutdown_ || watches_closed_) return;  // the launcher stops: streams end on purpose
  const auto now = Clock::now();
  std::vector<JobPtr> jobs = jobs_;
  for (const JobPtr& job_ptr : jobs) {
    Job& job = *job_ptr;
    JobFailure gone;
    if (job.finished || !AgentGoneCauseLocked(job, agent_id, &gone)) continue;
    job.dropped_agents.insert(agent_id);
    if (job.held) {  // a rank failure blamed on a peer, waiting for its cause: this is it
      job.held.reset();
      FailLocked(job, gone, control::kGenericFailureExitCode);
      job.cause_time_ms = 0;
      job.cause_secondary = false;
      continue;
    }
    // A rank's exit became the cause a moment ago (or blamed a peer): the agent's loss, reported
    // a little later over another connection, explains it. Older causes stand.
    const bool replace = job.cause_time_ms > 0 &&
                         (job.cause_secondary || now - job.cause_set_at <= options_.cause_settle);
    if (!replace) continue;
    std::string old_message;
    if (job.status.state == JobState::kFailed && job.status.has_failure) {
      old_message = job.status.failure.message;
      job.status.failure = gone;
      job.status.exit_code = control::kGenericFailureExitCode;
    } else if (job.status.state == JobState::kRestarting && !job.status.previous_failures.empty()) {
      old_message = job.status.previous_failures.back().message;
      job.status.previous_failures.back() = gone;
    } else {
      continue;
    }
    const size_t at = job.status.reason.find(old_message);
    if (!old_message.empty() && at != std::string::npos) {
      job.status.reason.replace(at, old_message.size(), gone.message);
    } else {
      job.status.reason = gone.message;
    }
    job.cause_time_ms = 0;
    job.cause_secondary = false;
    HVD_LOG(INFO) << "job " << job.status.id << ": cause is now " << gone.message << " (was "
                  << old_message << ")";
    ChangedLocked(job, /*marker=*/true);
  }
}

}  // namespace hvd::launcherd
