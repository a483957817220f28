// JobManager: submission, queries, cancel and placement. What agents report (rank events, output,
// heartbeats, loss) and the state changes are in job_events.cc; WatchJob's source in job_watch.cc.
#include "launcherd/job_manager.h"

#include <csignal>

#include "common/logging.h"
#include "control/log_escape.h"
#include "control/token.h"
#include "control/worker_env.h"

namespace hvd::launcherd {
namespace {

constexpr int kMaxRanks = 1 << 20;  // the runtime's own limit on HVD_SIZE

Status ValidateSpec(const JobSpec& spec) {
  if (spec.argv.empty() || spec.argv[0].empty()) {
    return InvalidArgument(
        "the job has no program: give the command to run after the options (hvdrun -np 2 "
        "./train.py)");
  }
  if (spec.np < 1 || spec.np > kMaxRanks) {
    return InvalidArgument("np=" + std::to_string(spec.np) + " is out of range [1, " +
                           std::to_string(kMaxRanks) + "]; pass -np N");
  }
  int64_t host_slots = 0;
  for (const control::HostRequest& h : spec.hosts) {
    if (h.host.empty()) {
      return InvalidArgument("the host list has an empty host name; use -H a:2,b:2");
    }
    if (h.slots < 1) {
      return InvalidArgument("host " + h.host + " is given " + std::to_string(h.slots) +
                             " slots; give each host at least 1 (-H " + h.host + ":1)");
    }
    host_slots += h.slots;
  }
  if (!spec.hosts.empty() && host_slots < spec.np) {
    return InvalidArgument("np=" + std::to_string(spec.np) + " but the host list gives only " +
                           std::to_string(host_slots) +
                           " slots; raise the hosts' slots (-H host:N) or lower np");
  }
  if (spec.stdin_rank >= spec.np || (spec.stdin_rank < 0 && spec.stdin_rank != -1)) {
    return InvalidArgument("--stdin " + std::to_string(spec.stdin_rank) +
                           " names no rank of the job (np=" + std::to_string(spec.np) +
                           "); give a rank below np, or none");
  }
  return control::ValidateJobEnv(spec.env);
}

}  // namespace

JobManager::JobManager(JobManagerOptions options, AgentRegistry* agents, KvStore* store)
    : options_(std::move(options)), agents_(agents), store_(store) {}

Status JobManager::Submit(const JobSpec& spec, std::string* id) {
  HVD_RETURN_IF_ERROR(ValidateSpec(spec));
  std::lock_guard<std::mutex> lock(mu_);
  if (shutdown_) return Unavailable("the launcher is shutting down; submit to another launcher");
  auto job = std::make_shared<Job>(options_.max_output_lines, options_.max_output_bytes);
  do {
    job->status.id = control::RandomHex(4);
  } while (by_id_.count(job->status.id));
  job->status.spec = spec;
  job->status.state = JobState::kPending;
  job->status.reason = "waiting for placement";
  job->status.submit_time_ms = NowMs();
  job->status.queued_since_ms = job->status.submit_time_ms;
  job->unwatched_since = Clock::now();
  job->secret = control::RandomHex(32);
  {
    std::lock_guard<std::mutex> secrets_lock(secrets_mu_);
    secrets_[job->status.id] = job->secret;
  }
  jobs_.push_back(job);
  by_id_[job->status.id] = job;
  ChangedLocked(*job, /*marker=*/true);  // a watcher's history starts with the submitted job
  *id = job->status.id;
  HVD_LOG(INFO) << "job " << *id << " submitted: np=" << spec.np << " "
                << control::LogEscape(spec.argv[0]);
  ScheduleLocked();
  return Status::OK();
}

JobManager::JobPtr JobManager::FindLocked(const std::string& id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : it->second;
}

Status JobManager::Get(const std::string& id, JobStatus* out) const {
  std::lock_guard<std::mutex> lock(mu_);
  JobPtr job = FindLocked(id);
  if (!job) {
    return NotFound("no job '" + id + "' on this launcher (finished jobs are kept for the last " +
                    std::to_string(options_.max_finished_jobs) + "); list jobs with: hvdrun list");
  }
  *out = job->status;
  return Status::OK();
}

std::vector<JobStatus> JobManager::List() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<JobStatus> out;
  out.reserve(jobs_.size());
  for (const JobPtr& job : jobs_) {
    JobStatus summary = job->status;
    summary.ranks.clear();
    out.push_back(std::move(summary));
  }
  return out;
}

void JobManager::ListPage(const std::string& after_id, int64_t after_submit_ms,
                          const std::function<bool(const JobStatus&)>& take, bool* more) const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t i = 0;
  if (!after_id.empty()) {
    while (i < jobs_.size() && jobs_[i]->status.id != after_id) ++i;
    if (i < jobs_.size()) {
      ++i;
    } else {  // pruned since the last page: resume by time
      i = 0;
      while (i < jobs_.size() && jobs_[i]->status.submit_time_ms <= after_submit_ms) ++i;
    }
  }
  *more = false;
  for (; i < jobs_.size(); ++i) {
    if (!take(jobs_[i]->status)) {
      *more = true;
      return;
    }
  }
}

Status JobManager::Cancel(const std::string& id, const std::string& reason, JobState* state,
                          int signal) {
  std::lock_guard<std::mutex> lock(mu_);
  JobPtr job = FindLocked(id);
  if (!job) return NotFound("no job '" + id + "' on this launcher; list jobs with: hvdrun list");
  if (!control::IsTerminal(job->status.state)) {
    job->stop_signal = signal;  // StopAgentsLocked's, through EndLocked
    EndLocked(*job, JobState::kCancelled, "cancelled: " + (reason.empty() ? "by a user" : reason),
              control::kCancelledExitCode);
  } else if (signal == SIGKILL && !job->finished) {
    // Ended, but ranks still run their kill grace: end them now.
    std::set<std::string> agents;
    for (const RankStatus& r : job->status.ranks) {
      if (RankLive(r.state)) agents.insert(r.placement.agent_id);
    }
    for (const std::string& agent : agents) {
      std::shared_ptr<AgentLink> link = agents_->Link(agent);
      if (link) link->SendStopJob({job->status.id, reason, 0, SIGKILL});
    }
  }
  *state = job->status.state;
  return Status::OK();
}

std::chrono::milliseconds JobManager::KillGrace(const Job& job) const {
  return OrDefault(job.status.spec.kill_grace_ms, options_.kill_grace);
}

std::map<std::string, std::set<int>> JobManager::BusySlotsLocked() const {
  std::map<std::string, std::set<int>> busy;
  for (const JobPtr& job : jobs_) {
    if (job->finished) continue;
    for (const RankStatus& r : job->status.ranks) {
      if (r.state == RankState::kStarting || r.state == RankState::kRunning) {
        busy[r.placement.agent_id].insert(r.placement.slot);
      }
    }
  }
  return busy;
}

void JobManager::Schedule() {
  std::lock_guard<std::mutex> lock(mu_);
  ScheduleLocked();
}

void JobManager::ScheduleLocked() {
  // Starting or failing a job can free slots and ask for another pass; run passes here instead of
  // recursing, and never over jobs_ itself (finishing a job may prune it).
  if (scheduling_) {
    reschedule_ = true;
    return;
  }
  scheduling_ = true;
  for (int pass = 0; pass < 8 && !shutdown_; ++pass) {
    reschedule_ = false;
    std::vector<control::AgentSlots> agents = agents_->Schedulable();
    std::map<std::string, std::set<int>> busy = BusySlotsLocked();
    std::vector<JobPtr> pending;
    for (const JobPtr& job : jobs_) {
      if (job->status.state == JobState::kPending) pending.push_back(job);
    }
    for (const JobPtr& job : pending) {
      if (job->status.state != JobState::kPending) continue;
      for (control::AgentSlots& a : agents) a.busy = busy[a.id];
      control::PlacementRequest req;
      req.np = job->status.spec.np;
      req.hosts = job->status.spec.hosts;
      control::PlacementResult r = control::Place(agents, req);
      ReportAgentsReadyLocked(*job, agents);
      switch (r.outcome) {
        case control::PlacementOutcome::kPlaced:
          if (job->placed_since_ms == 0) job->placed_since_ms = NowMs();
          if (!NetworkReadyLocked(*job, r)) break;
          if (!MasterPortReadyLocked(*job, r)) break;
          for (const control::RankSlot& s : r.ranks) busy[s.agent_id].insert(s.slot);
          StartLocked(*job, r, agents);
          break;
        case control::PlacementOutcome::kWait:
          if (job->placed_since_ms > 0) {
            // Back to waiting for slots: the time placed does not count towards --queue-timeout,
            // and the MASTER_PORT asked for that placement is asked afresh for the next one.
            if (job->status.queued_since_ms > 0) {
              job->status.queued_since_ms += NowMs() - job->placed_since_ms;
            }
            job->placed_since_ms = 0;
            job->master_port = Job::MasterPortAsk();
          }
          if (job->status.reason != r.reason) {
            job->status.reason = r.reason;
            ChangedLocked(*job, /*marker=*/true);
          }
          break;
        case control::PlacementOutcome::kNeverFits: {
          JobFailure f;
          f.message = "cannot place the job: " + r.reason;
          FailLocked(*job, f, control::kGenericFailureExitCode, /*permanent=*/true);
          break;
        }
      }
    }
    if (!reschedule_) break;
  }
  scheduling_ = false;
}

void JobManager::ReportAgentsReadyLocked(Job& job, const std::vector<control::AgentSlots>& agents) {
  // Only a host list names agents a job waits for; without one any agent will do.
  const auto& hosts = job.status.spec.hosts;
  if (hosts.empty()) return;
  int needed = 0, ready = 0, remaining = job.status.spec.np;
  for (const control::HostRequest& h : hosts) {
    if (remaining <= 0) break;
    remaining -= h.slots;
    ++needed;
    for (const control::AgentSlots& a : agents) {
      if (a.host == h.host || (!a.advertise_addr.empty() && a.advertise_addr == h.host)) {
        ++ready;
        break;
      }
    }
  }
  std::string text = "agents ready " + std::to_string(ready) + "/" + std::to_string(needed);
  if (text == job.agents_ready) return;
  job.agents_ready = text;
  job.log.AddProgress(text);
  job.cv.notify_all();
}

void JobManager::StartLocked(Job& job, const control::PlacementResult& placement,
                             const std::vector<control::AgentSlots>& agents) {
  std::map<std::string, const control::AgentSlots*> agent_by_id;
  for (const control::AgentSlots& a : agents) agent_by_id[a.id] = &a;
  std::set<std::string> used;
  job.placed_since_ms = 0;  // started: no longer placed and pending
  job.status.ranks.clear();
  for (const control::RankSlot& s : placement.ranks) {
    RankStatus r;
    r.placement = s;
    r.state = RankState::kPending;  // kStarting once sent; a rank never sent holds no slot
    job.status.ranks.push_back(r);
    used.insert(s.agent_id);
  }
  job.status.start_time_ms = NowMs();
  job.attempt_started = Clock::now();
  job.at_rendezvous = 0;
  job.start_timeout_waived = false;
  const int np = job.status.spec.np;
  // The runtime's own wait at start-up outlasts the launcher's, whose message names hosts and
  // reasons; with no launcher limit the runtime's default stands.
  std::map<std::string, std::string> job_env = job.status.spec.env;
  const auto start_timeout = OrDefault(job.status.spec.start_timeout_ms, options_.start_timeout);
  if (start_timeout.count() > 0 && !job_env.count("HVD_START_TIMEOUT_SECONDS")) {
    job_env["HVD_START_TIMEOUT_SECONDS"] = std::to_string(start_timeout.count() / 1000 + 10);
  }
  SetStateLocked(job, JobState::kStarting,
                 "starting " + std::to_string(np) + " rank" + (np == 1 ? "" : "s") + " on " +
                     std::to_string(used.size()) + " agent" + (used.size() == 1 ? "" : "s"));
  if (job.status.spec.hosts.empty()) {
    job.agents_ready =
        "agents ready " + std::to_string(used.size()) + "/" + std::to_string(used.size());
    job.log.AddProgress(job.agents_ready);
  }
  // torchrun's node numbers and rendezvous (control/worker_env.h): MASTER_ADDR is rank 0's
  // address as the other ranks reach it (the network the check chose), loopback on one agent.
  int groups = 1;
  const std::vector<int> group_of = control::NodeGroups(placement.ranks, &groups);
  std::string master_addr = "127.0.0.1";
  if (used.size() > 1) {
    const control::RankSlot& zero = placement.ranks.front();
    std::string iface;
    master_addr = agent_by_id.at(zero.agent_id)->advertise_addr;
    control::ChoiceFor(job.status.network, zero.agent_id, &master_addr, &iface);
    if (master_addr.empty()) master_addr = zero.host;
  }
  for (RankStatus& r : job.status.ranks) {
    control::WorkerEnvInput in;
    in.placement = r.placement;
    in.size = np;
    in.rendezvous_address = options_.rendezvous_address;
    in.job_id = job.status.id;
    in.attempt = job.status.attempt;
    in.job_secret = job.secret;
    in.advertise_addr = agent_by_id.at(r.placement.agent_id)->advertise_addr;
    control::ChoiceFor(job.status.network, r.placement.agent_id, &in.advertise_addr, &in.iface);
    in.job_env = job_env;
    in.max_restarts = job.status.spec.max_restarts;
    in.group_rank = group_of[r.placement.rank];
    in.group_world_size = groups;
    in.master_addr = master_addr;
    in.master_port = job.master_port.port;
    StartRankCommand cmd;
    cmd.job_id = job.status.id;
    cmd.attempt = job.status.attempt;
    cmd.placement = r.placement;
    cmd.argv = job.status.spec.argv;
    cmd.env = control::WorkerEnv(in);
    cmd.working_dir = job.status.spec.working_dir;
    cmd.forward_stdin = job.status.spec.stdin_rank == r.placement.rank;
    cmd.run_as = job.status.spec.run_as;
    std::shared_ptr<AgentLink> link = agents_->Link(r.placement.agent_id);
    if (link && link->SendStartRank(cmd)) {
      r.state = RankState::kStarting;
      continue;
    }
    // The agent's stream ended between placement and now.
    r.state = RankState::kFailedToStart;
    r.error = "agent " + r.placement.agent_id + " disconnected before it received the rank";
    r.end_time_ms = NowMs();
    JobFailure f;
    f.rank = r.placement.rank;
    f.host = r.placement.host;
    f.message = "rank " + std::to_string(f.rank) + " on " + f.host + " could not start: " + r.error;
    FailLocked(job, f, control::kGenericFailureExitCode);
    return;
  }
  HVD_LOG(INFO) << "job " << job.status.id << ": " << control::LogEscape(job.status.reason, 1024);
}

bool JobManager::ResolveSecret(const std::string& secret, std::string* prefix) const {
  if (secret.empty()) return false;
  std::lock_guard<std::mutex> lock(secrets_mu_);
  bool found = false;
  // Compare against every live secret in constant time rather than looking it up by value.
  for (const auto& [id, s] : secrets_) {
    if (control::TokensEqual(secret, s) && !found) {
      found = true;
      *prefix = "job/" + id + "/";
    }
  }
  return found;
}

JobCounts JobManager::Counts() const {
  std::lock_guard<std::mutex> lock(mu_);
  JobCounts c;
  for (const JobPtr& job : jobs_) {
    ++c.jobs[job->status.state];
    for (const RankStatus& r : job->status.ranks) c.ranks_running += r.state == RankState::kRunning;
  }
  for (const auto& [agent, slots] : BusySlotsLocked()) {
    c.slots_in_use[agent] = static_cast<int>(slots.size());
  }
  return c;
}

void JobManager::Shutdown(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  if (shutdown_) return;
  shutdown_ = true;
  std::vector<JobPtr> jobs = jobs_;
  for (const JobPtr& job : jobs) {
    if (!control::IsTerminal(job->status.state)) {
      EndLocked(*job, JobState::kCancelled, reason, control::kCancelledExitCode);
    }
  }
}

bool JobManager::WaitRanksGone(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return finished_cv_.wait_for(lock, timeout, [&] {
    for (const JobPtr& job : jobs_) {
      if (control::IsTerminal(job->status.state) && !job->finished) return false;
    }
    return true;
  });
}

void JobManager::CloseWatches() {
  std::lock_guard<std::mutex> lock(mu_);
  watches_closed_ = true;
  for (const JobPtr& job : jobs_) job->cv.notify_all();
}

std::vector<AgentInfo> AgentsWithSlotsInUse(const AgentRegistry& agents, const JobManager& jobs) {
  std::vector<AgentInfo> list = agents.List();
  const JobCounts counts = jobs.Counts();
  for (AgentInfo& a : list) {
    auto it = counts.slots_in_use.find(a.id);
    a.slots_in_use = it == counts.slots_in_use.end() ? 0 : it->second;
  }
  return list;
}

void JobManager::PruneLocked() {
  size_t finished = 0;
  for (const JobPtr& job : jobs_) finished += job->finished;
  for (auto it = jobs_.begin(); it != jobs_.end() && finished > options_.max_finished_jobs;) {
    if ((*it)->finished) {
      if (options_.job_store != nullptr) {
        Status s = options_.job_store->Remove((*it)->status.id);
        if (!s.ok()) {
          HVD_LOG(WARNING) << s.message();
        }
      }
      by_id_.erase((*it)->status.id);
      it = jobs_.erase(it);
      --finished;
    } else {
      ++it;
    }
  }
}

}  // namespace hvd::launcherd
