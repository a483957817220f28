// JobManager: the job table across launcher restarts, and agents that come back. Changed jobs are
// written to the JobStore in batches (JobTable::Persist marks, Flush writes; a state change at
// once, rank-level detail by the next tick); Restore() reads it back at start. A job
// with ranks running on an agent is "unconfirmed" there whenever that agent (re-)registers, and
// after a launcher restart, until the agent's first heartbeat since says whether it still runs
// the job (its queued rank events, exits during the outage included, arrive before that
// heartbeat). Ranks it no longer runs ended while it was out of touch (the agent restarted, or
// lost its stream and the StartRank with it) and fail the job saying so. An agent that never
// comes back is declared lost after the lease like any other. Nothing is silently forgotten.
#include "base/logging.h"
#include "launcherd/job_manager.h"

namespace hvd::launcherd {

Status JobManager::Restore(std::vector<AgentInfo>* expected) {
  if (options_.job_store == nullptr) return Status::OK();
  std::vector<StoredJob> stored;
  HVD_RETURN_IF_ERROR(options_.job_store->LoadAll(&stored));
  base::MutexLock lock(&mu_);
  std::map<std::string, AgentInfo> agents;
  int live_jobs = 0;
  const auto now = Job::Clock::now();
  for (StoredJob& s : stored) {
    if (table_.Has(s.status.id)) continue;
    JobPtr job = NewJobLocked();
    job->status = std::move(s.status);
    job->secret = s.secret;
    // Past any seq handed out before, even one written after the last persisted change.
    job->log.ContinueFrom(std::max<int64_t>(s.next_seq, base::WallMs() * 1000));
    // Its attached hvdrun gets two extra leases to reconnect: it noticed the outage late and
    // backs off between attempts, and a job must not be lost for want of patience here.
    job->unwatched_since = now + 2 * options_.client_lease;
    job->attempt_started = now;
    job->ended_at = now;
    job->rendezvous_restored = true;
    for (const RankStatus& r : job->status.ranks) {
      if (r.rendezvous_time_ms != 0 && r.placement.rank < job->status.spec.np) ++job->at_rendezvous;
      if (r.state == RankState::kRunning) ++job->ranks_started;
      if (!RankLive(r.state)) continue;
      job->unconfirmed_agents.insert(r.placement.agent_id);
      AgentInfo& a = agents[r.placement.agent_id];
      a.id = r.placement.agent_id;
      a.host = r.placement.host;
    }
    job->ElasticRestored(Instant::Now());
    job->finished = job->terminal() && !AnyRankLive(job->status);
    if (!job->finished) {
      ++live_jobs;
      secrets_.Add(job->id(), job->secret);
    }
    job->log.AddStatus(job->status, job->version);
    table_.Add(job);
  }
  for (auto& [id, a] : agents) expected->push_back(a);
  if (!stored.empty()) {
    HVD_LOG(INFO) << "restored " << stored.size() << " job(s) from the state dir; " << live_jobs
                  << " not finished, waiting for " << agents.size()
                  << " agent(s) to say what still runs";
  }
  ScheduleLocked();
  return Status::OK();
}

void JobManager::OnAgentRegistered(const std::string& agent_id) {
  base::MutexLock lock(&mu_);
  for (const JobPtr& job : table_.jobs()) {
    if (job->finished) continue;
    for (const RankStatus& r : job->status.ranks) {
      if (r.placement.agent_id == agent_id && RankLive(r.state)) {
        job->unconfirmed_agents.insert(agent_id);
        break;
      }
    }
  }
}

void JobManager::ReconcileUnconfirmedLocked(const std::string& agent_id,
                                            const std::set<std::string>& running) {
  std::vector<JobPtr> jobs = table_.jobs();
  for (const JobPtr& job : jobs) {
    if (job->unconfirmed_agents.erase(agent_id) == 0 || running.count(job->id())) continue;
    // The agent is back and does not run the job: its ranks there ended while the launcher was
    // away, and their ends were not among the events the agent kept for it.
    const std::vector<int> lost = job->KillRanksOnAgent(
        agent_id, "gone from its agent when it came back in touch with the launcher",
        base::WallMs());
    if (lost.empty()) continue;
    JobFailure f;
    f.rank = lost[0];
    f.host = job->status.ranks[lost[0]].placement.host;
    f.message = RankList(lost) + " on " + f.host + " ended while agent " + agent_id +
                " was out of touch with the launcher (it came back without them and kept no exit "
                "report: the agent or the launcher restarted)";
    if (job->elastic()) {  // they leave; the others go on
      job->WorkerLost(f, control::kGenericFailureExitCode, Instant::Now(), false, lost);
      SettleLocked(*job);
      continue;
    }
    FailLocked(*job, f, control::kGenericFailureExitCode);
  }
}

}  // namespace hvd::launcherd
