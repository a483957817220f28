// JobManager: what agents report (rank events, output, heartbeats, loss), what the rendezvous
// store tells of the ranks, the supervisor's Tick, and settling a job after it changed: the StopJob
// commands it asked for, a held cause released, its next attempt, or its end (secret forgotten,
// keys erased, table pruned). The rules themselves are the Job's (job.h).
#include "base/logging.h"
#include "base/rendezvous_keys.h"
#include "control/text.h"
#include "launcherd/job_manager.h"

namespace hvd::launcherd {
namespace {

// Longer lines are cut so one runaway line cannot take the output log's whole byte budget.
constexpr size_t kMaxLineBytes = 16 << 10;

}  // namespace

void JobManager::SendStopsLocked(Job& job) {
  for (Job::Stop& stop : job.TakeStops()) {
    std::shared_ptr<AgentLink> link = agents_->Link(stop.agent_id);
    // A disconnected agent gets it when it reconnects and lists the job (OnHeartbeat).
    // Some ranks only: not recorded; Job::ResendRemovals sends it again if it has no effect.
    const bool whole_job = stop.command.ranks.empty();
    if (link && link->SendStopJob(stop.command) && whole_job) job.stop_sent.insert(stop.agent_id);
  }
}

void JobManager::SendStackDumpsLocked(Job& job) {
  for (Job::StackDump& dump : job.TakeStackDumps()) {
    std::shared_ptr<AgentLink> link = agents_->Link(dump.agent_id);
    // A disconnected agent's ranks are not asked: the stall outlives a reconnection, and the
    // stacks are a diagnosis, not a duty.
    if (!link || !link->SendStackDump(dump.command)) {
      HVD_LOG(WARNING) << "job " << job.id() << ": could not ask agent " << dump.agent_id
                       << " for the stacks of " << RankList(dump.command.ranks)
                       << " (not connected)";
      // Said once: the ranks stay marked as asked for this stall (a later report does not ask,
      // and say, again).
      job.log.AddProgress(std::string(control::kStacksAskedNote) + "the agent of " +
                          job.RanksText(dump.command.ranks) +
                          " is not connected: no stacks from there");
    }
  }
}

void JobManager::PublishMembershipLocked(Job& job) {
  // The generation's workers first: a worker that reads the newest number finds its list.
  const std::string scope = base::AttemptPrefix(job.id(), job.status.attempt);
  for (const Job::Publication& p : job.TakePublications()) {
    if (!p.finished.empty()) {
      Status s = store_->Set(scope + base::ElasticFinishedKey(), p.finished);
      if (!s.ok()) {
        HVD_LOG(ERROR) << "job " << job.id() << ": " << s.message();
      }
      continue;
    }
    Status s = store_->Set(scope + base::ElasticGenerationKey(p.generation),
                           base::FormatElasticWorkers(p.workers));
    if (s.ok()) s = store_->Set(scope + base::ElasticLatestKey(), std::to_string(p.generation));
    if (!s.ok()) {
      HVD_LOG(ERROR) << "job " << job.id() << ": could not publish elastic generation "
                     << p.generation << ": " << s.message();
    }
  }
}

void JobManager::SettleLocked(Job& job) {
  PublishMembershipLocked(job);
  SendStopsLocked(job);
  const Instant now = Instant::Now();
  // A held failure has nothing more to wait for once every rank is gone.
  if (job.holds_failure() && !job.AnyRankLive()) {
    job.ReleaseHeld(now);
    SendStopsLocked(job);
  }
  if (job.RestartDue(now.steady)) {  // until then, Tick() settles it again
    store_->EraseScope(base::AttemptPrefix(job.id(), job.status.attempt));
    job.NextAttempt(now);
    ScheduleLocked();
  }
  if (job.Finish()) {
    // The secret first: the rendezvous server checks it before every request, so nothing can
    // write a key of this job after its keys are erased.
    secrets_.Forget(job.id());
    store_->EraseScope(base::JobPrefix(job.id()));
    watch_.NotifyFinished();
    table_.Prune();
  }
  ScheduleLocked();  // slots may have freed up
}

void JobManager::EndLocked(Job& job, JobState to, const std::string& reason, int exit_code) {
  job.End(to, reason, exit_code, Instant::Now());
  SettleLocked(job);
}

void JobManager::FailLocked(Job& job, const JobFailure& failure, int exit_code) {
  job.Fail(failure, exit_code, Instant::Now());
  SettleLocked(job);
}

void JobManager::OnRankEvent(const std::string& agent_id, const RankEventReport& ev) {
  base::MutexLock lock(&mu_);
  OnRankEventLocked(agent_id, ev);
}

void JobManager::OnRankEventLocked(const std::string& agent_id, const RankEventReport& ev) {
  JobPtr job = table_.Find(ev.job_id);
  if (!job || ev.attempt != job->status.attempt) {
    HVD_LOG(DEBUG) << "agent " << agent_id << ": event for unknown job " << ev.job_id << " attempt "
                   << ev.attempt << " ignored";
    return;
  }
  const AgentConnected connected = [this](const std::string& agent) { return Connected(agent); };
  if (job->OnRankEvent(ev, agent_id, connected, Instant::Now())) SettleLocked(*job);
}

void JobManager::OnOutput(const std::string& agent_id, const std::string& job_id,
                          std::vector<OutputLine> lines) {
  base::MutexLock lock(&mu_);
  OnOutputLocked(agent_id, job_id, std::move(lines));
}

void JobManager::OnOutputLocked(const std::string& agent_id, const std::string& job_id,
                                std::vector<OutputLine> lines) {
  JobPtr job = table_.Find(job_id);
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
      // At a character's start: the agent sends valid UTF-8, and the cut keeps it so.
      line.text.resize(control::Utf8Prefix(line.text, kMaxLineBytes).size());
      line.text += " [line cut at 16 KiB]";
    }
    job->log.AddOutput(std::move(line));
    added = true;
  }
  if (added) watch_.Notify(job_id);
}

void JobManager::OnHeartbeat(const std::string& agent_id,
                             const std::vector<std::string>& running_jobs) {
  base::MutexLock lock(&mu_);
  OnHeartbeatLocked(agent_id, running_jobs);
}

void JobManager::OnHeartbeatLocked(const std::string& agent_id,
                                   const std::vector<std::string>& running_jobs) {
  const auto now = Job::Clock::now();
  std::set<std::string> running(running_jobs.begin(), running_jobs.end());
  ReconcileUnconfirmedLocked(agent_id, running);
  std::shared_ptr<AgentLink> link = agents_->Link(agent_id);
  for (const std::string& id : running) {
    JobPtr job = table_.Find(id);
    // The agent runs a job this launcher knows nothing of (it restarted, or forgot the job).
    if (!job) {
      if (link) {
        link->SendStopJob({id, "the launcher does not know this job", options_.kill_grace.count()});
      }
      continue;
    }
    if (!job->terminal()) continue;
    const bool overdue = now - job->ended_at > options_.reconcile_after;
    if (link && (!job->stop_sent.count(agent_id) || overdue)) {
      link->SendStopJob({id, job->status.reason, job->KillGrace().count()});
      job->stop_sent.insert(agent_id);
    }
  }
  // The reverse: an ended job whose ranks here were never reported gone, though the agent no
  // longer runs it. Waiting past reconcile_after avoids racing StartRank/StopJob still in flight.
  std::vector<JobPtr> jobs = table_.jobs();
  for (const JobPtr& job : jobs) {
    if (job->finished || !job->terminal() || running.count(job->id()) ||
        now - job->ended_at <= options_.reconcile_after) {
      continue;
    }
    if (!job->KillRanksOnAgent(agent_id, "its agent no longer runs it", base::WallMs()).empty()) {
      SettleLocked(*job);
    }
  }
}

void JobManager::OnAgentLost(const AgentInfo& agent) {
  base::MutexLock lock(&mu_);
  OnAgentGoneLocked(agent, /*stopped=*/false);
}

void JobManager::OnAgentGoneLocked(const AgentInfo& agent, bool stopped) {
  // A stopped agent ended its ranks and reported each before its goodbye: normally none is left.
  const std::string cause = "agent on " + agent.host + (stopped ? " stopped" : " lost");
  std::vector<JobPtr> jobs = table_.jobs();
  for (const JobPtr& job : jobs) {
    if (job->finished) continue;
    const std::vector<int> lost = job->KillRanksOnAgent(agent.id, cause, base::WallMs());
    if (lost.empty()) continue;
    JobFailure f;
    f.rank = lost[0];
    f.host = agent.host;
    const std::string how =
        agent.lost_reason.empty() ? "it stopped sending heartbeats" : agent.lost_reason;
    f.message = cause + " (agent " + agent.id + ": " + how + ")" +
                (job->ReForms() ? "" : "; " + RankList(lost) + " ran there");
    if (job->ReForms()) {  // its workers there leave; the others go on
      job->WorkerLost(f, control::kGenericFailureExitCode, Instant::Now(), /*agent_lost=*/true,
                      lost);
      SettleLocked(*job);
      continue;
    }
    FailLocked(*job, f, control::kGenericFailureExitCode);
  }
}

void JobManager::OnAgentDisconnected(const std::string& agent_id, const AgentInfo* stopped) {
  base::MutexLock lock(&mu_);
  if (shutdown_ || watch_.closed()) return;  // the launcher stops: streams end on purpose
  if (stopped != nullptr) {
    // It said goodbye, after reporting its ranks' ends: it will not be back to report any
    // other, and no lease will run out for it.
    OnAgentGoneLocked(*stopped, /*stopped=*/true);
    return;
  }
  const Instant now = Instant::Now();
  const AgentConnected connected = [this](const std::string& agent) { return Connected(agent); };
  std::vector<JobPtr> jobs = table_.jobs();
  for (const JobPtr& job : jobs) {
    if (job->AgentDropped(agent_id, connected, now)) SettleLocked(*job);
  }
}

void JobManager::Tick() {
  base::MutexLock lock(&mu_);
  const Instant now = Instant::Now();
  const AgentConnected connected = [this](const std::string& agent) { return Connected(agent); };
  std::vector<JobPtr> jobs = table_.jobs();  // settling a job may prune the table
  for (const JobPtr& job : jobs) {
    switch (supervisor_.Check(*job, now, connected, backlog_)) {
      case Supervisor::Next::kNothing:
        break;
      case Supervisor::Next::kSettle:
        SettleLocked(*job);
        break;
      case Supervisor::Next::kSchedule:
        ScheduleLocked();
        break;
    }
  }
  // Workers beyond a host list that waited for a state holder (Job::ShrinkTo).
  for (const JobPtr& job : jobs) {
    if (job->shrink_pending()) ShrinkLocked(*job);
  }
  // An elastic job below --max-np that became RUNNING since (no event schedules then).
  GrowLocked(/*force=*/true);
  if (options_.closed_cluster) FailStrandedLocked();
  table_.Flush();  // the changes batched since the last tick, one transaction (job_table.h)
}

void JobManager::FailStrandedLocked() {
  std::vector<JobPtr> waiting;
  for (const JobPtr& job : table_.jobs()) {
    if (job->ElasticWaiting()) waiting.push_back(job);
  }
  if (waiting.empty()) return;
  // An agent that is not READY (its stream broke and it reconnects, or it stops) may yet come
  // back with slots: no conclusion until every agent is.
  for (const AgentInfo& a : agents_->List()) {
    if (a.state != "READY") return;
  }
  const Scheduler::Pass view = scheduler_.BeginPass(table_.jobs());
  for (const JobPtr& job : waiting) {
    std::string why;
    if (Scheduler::CouldGrow(*job, view, &why)) continue;
    job->ElasticStranded(why, Instant::Now());
    SettleLocked(*job);
  }
}

void JobManager::SetAgentBacklog(AgentBacklog backlog) {
  base::MutexLock lock(&mu_);
  backlog_ = std::move(backlog);
}

void JobManager::OnRendezvousKey(const std::string& key, const std::string& value) {
  base::RankKeyParts k;
  if (!base::ParseRankKey(key, &k).ok()) {
    base::ElasticMeetingKeyParts m;
    if (base::ParseElasticMeetingKey(key, &m)) {  // an elastic worker at a later meeting
      base::MutexLock lock(&mu_);
      JobPtr job = table_.Find(m.job_id);
      if (job && job->status.attempt == m.attempt && !job->terminal()) {
        const int worker = job->MeetingWorker(m.generation, m.index);
        if (worker >= 0) supervisor_.RankAtRendezvous(*job, worker, Instant::Now());
      }
    }
    return;  // any other key: nothing to supervise
  }
  base::MutexLock lock(&mu_);
  JobPtr job = table_.Find(k.job_id);
  if (!job || job->status.attempt != k.attempt ||
      k.rank >= static_cast<int>(job->status.ranks.size()) || job->terminal()) {
    return;
  }
  switch (k.kind) {
    case base::RankKeyKind::kHost:
      supervisor_.RankAtRendezvous(*job, k.rank, Instant::Now());
      break;
    case base::RankKeyKind::kStall:
      supervisor_.StallReport(*job, k.rank, value, Instant::Now());
      SendStackDumpsLocked(*job);
      break;
    case base::RankKeyKind::kAbsent:
      if (job->WorkersAbsent(k.rank, value, Instant::Now())) SettleLocked(*job);
      break;
    case base::RankKeyKind::kCommitted:  // k.rank: an elastic worker's id
      job->NoteCommitted(k.rank);
      if (job->shrink_pending()) ShrinkLocked(*job);  // it may be the holder a shrink waits for
      break;
    case base::RankKeyKind::kAbort:
      // Its coming failure is a consequence of another's; "" withdraws that (the rank went on,
      // or a new session of it started).
      if (value.empty()) {
        job->PeerFailureWithdrawn(k.rank);
      } else {
        job->NotePeerFailed(k.rank, value);
      }
      break;
  }
}

void JobManager::WatchStarted(const std::string& id) {
  base::MutexLock lock(&mu_);
  if (JobPtr job = table_.Find(id)) supervisor_.WatchStarted(*job);
}

void JobManager::WatchEnded(const std::string& id) {
  base::MutexLock lock(&mu_);
  if (JobPtr job = table_.Find(id)) supervisor_.WatchEnded(*job, Instant::Now());
}

}  // namespace hvd::launcherd
