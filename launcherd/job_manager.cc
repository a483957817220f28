// JobManager, the facade: submission, queries, cancel, the scheduler's passes and WatchJob. What
// agents and the rendezvous store report, the supervisor's Tick, and settling a job after it
// changed are in job_events.cc; the table across launcher restarts in job_recovery.cc.
#include "launcherd/job_manager.h"

#include <csignal>

#include "base/logging.h"
#include "control/log_escape.h"
#include "control/spec_limits.h"
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

// "no job 'ID' on this launcher": the id as sent, escaped and cut (it is echoed to a terminal,
// and a 20 KB one made a status message larger than gRPC's metadata limit).
std::string NoJob(const std::string& id) {
  return "no job '" + control::LogEscape(id, 64) + "' on this launcher";
}

}  // namespace

JobManager::JobManager(JobManagerOptions options, AgentRegistry* agents, KvStore* store)
    : options_(std::move(options)),
      rules_{options_.restart, options_.kill_grace, options_.cause_settle},
      agents_(agents),
      store_(store),
      table_(options_.job_store, options_.max_finished_jobs),
      scheduler_({options_.rendezvous_address, options_.start_timeout, options_.master_port_timeout,
                  options_.network, options_.rendezvous_tls},
                 agents),
      supervisor_({options_.start_timeout, options_.client_lease, options_.master_port_timeout}),
      watch_(options_.max_output_lines),
      published_([this] {
        base::MutexLock lock(&mu_);
        PublishLocked();
      }) {}

JobPtr JobManager::NewJobLocked() {
  auto job = std::make_shared<Job>(rules_, options_.max_output_lines, options_.max_output_bytes);
  job->SetObserver([this](const Job& changed) {
    mu_.AssertHeld();  // a Job changes only under the manager's lock
    table_.Persist(changed);
    watch_.Notify(changed.id());
    published_.Changed();
  });
  return job;
}

Status JobManager::Submit(const JobSpec& spec, std::string* id) {
  HVD_RETURN_IF_ERROR(ValidateSpec(spec));
  base::MutexLock lock(&mu_);
  if (shutdown_) return Unavailable("the launcher is shutting down; submit to another launcher");
  JobPtr job = NewJobLocked();
  job->status.id = table_.NewId();
  job->status.spec = spec;
  job->status.state = JobState::kPending;
  job->status.reason = "waiting for placement";
  job->status.submit_time_ms = base::WallMs();
  job->status.queued_since_ms = job->status.submit_time_ms;
  job->unwatched_since = Job::Clock::now();
  job->secret = control::RandomHex(32);
  secrets_.Add(job->id(), job->secret);
  table_.Add(job);
  job->Changed(/*marker=*/true);  // a watcher's history starts with the submitted job
  *id = job->id();
  HVD_LOG(INFO) << "job " << *id << " submitted: np=" << spec.np << " "
                << control::LogEscape(spec.argv[0]);
  ScheduleLocked();
  PublishLocked();  // the submitter reads its job at once (GET /v1/jobs/{id})
  return Status::OK();
}

Status JobManager::Get(const std::string& id, JobStatus* out) const {
  base::MutexLock lock(&mu_);
  JobPtr job = table_.Find(id);
  if (!job) {
    return NotFound(NoJob(id) + " (finished jobs are kept for the last " +
                    std::to_string(options_.max_finished_jobs) + "); list jobs with: hvdrun list");
  }
  *out = job->status;
  return Status::OK();
}

std::vector<JobStatus> JobManager::List() const {
  base::MutexLock lock(&mu_);
  std::vector<JobStatus> out;
  out.reserve(table_.jobs().size());
  for (const JobPtr& job : table_.jobs()) {
    JobStatus summary = job->status;
    summary.ranks.clear();
    out.push_back(std::move(summary));
  }
  return out;
}

void JobManager::ListPage(const std::string& after_id, int64_t after_submit_ms,
                          const std::function<bool(const JobStatus&)>& take, bool* more) const {
  base::MutexLock lock(&mu_);
  const std::vector<JobPtr>& jobs = table_.jobs();
  size_t i = 0;
  if (!after_id.empty()) {
    while (i < jobs.size() && jobs[i]->id() != after_id) ++i;
    if (i < jobs.size()) {
      ++i;
    } else {  // pruned since the last page: resume by time
      i = 0;
      while (i < jobs.size() && jobs[i]->status.submit_time_ms <= after_submit_ms) ++i;
    }
  }
  *more = false;
  for (; i < jobs.size(); ++i) {
    if (!take(jobs[i]->status)) {
      *more = true;
      return;
    }
  }
}

Status JobManager::UpdateHosts(const std::string& id,
                               const std::vector<control::HostRequest>& hosts) {
  control::JobSpec check;
  check.np = 1;  // the list may shrink below the job's size: its workers there go on
  check.hosts = hosts;
  if (hosts.empty()) return InvalidArgument("the discovery script's host list is empty");
  HVD_RETURN_IF_ERROR_CTX(control::CheckHostList(check), "--host-discovery-script");
  base::MutexLock lock(&mu_);
  JobPtr job = table_.Find(id);
  if (!job) return NotFound(NoJob(id) + "; list jobs with: hvdrun list");
  if (!job->elastic()) {
    return FailedPrecondition("job " + id + " is not elastic: its hosts are fixed");
  }
  if (job->terminal()) return FailedPrecondition("job " + id + " has ended");
  std::string text;
  for (const control::HostRequest& h : hosts) {
    text += (text.empty() ? "" : ",") + h.host + ":" + std::to_string(h.slots);
  }
  job->status.spec.hosts = hosts;
  job->log.AddProgress("hosts from --host-discovery-script: " + text);
  job->Changed(/*marker=*/false);
  ShrinkLocked(*job);  // stops the workers on hosts it left
  watch_.Notify(id);
  ScheduleLocked();  // grows onto new hosts
  return Status::OK();
}

void JobManager::ShrinkLocked(Job& job) {
  std::map<std::string, std::string> advertise;  // agent id -> its advertised address
  for (const AgentInfo& a : agents_->List()) {
    if (a.state == "READY") advertise[a.id] = a.advertise_addr;
  }
  // An agent of the job not in touch (a launcher restart, before it registered again) has no
  // known address, and a list may name its host by that: decide once it is back.
  for (const RankStatus& r : job.status.ranks) {
    if (RankLive(r.state) && !advertise.count(r.placement.agent_id)) {
      job.ShrinkLater();
      return;
    }
  }
  if (job.ShrinkTo(job.WorkersBeyondHosts(advertise), Instant::Now())) SettleLocked(job);
}

Status JobManager::Cancel(const std::string& id, const std::string& reason, JobState* state,
                          int signal) {
  base::MutexLock lock(&mu_);
  JobPtr job = table_.Find(id);
  if (!job) return NotFound(NoJob(id) + "; list jobs with: hvdrun list");
  if (!job->terminal()) {
    job->stop_signal = signal;  // the StopJob commands' first signal
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
      if (link) link->SendStopJob({job->id(), reason, 0, SIGKILL});
    }
  }
  *state = job->state();
  PublishLocked();  // as Submit: the canceller reads the state it caused
  return Status::OK();
}

Status JobManager::DumpStacks(const std::string& id, const std::vector<int>& ranks,
                              const std::string& why, std::vector<int>* asked) {
  base::MutexLock lock(&mu_);
  JobPtr job = table_.Find(id);
  if (!job) return NotFound(NoJob(id) + "; list jobs with: hvdrun list");
  if (job->terminal()) {
    return FailedPrecondition("job " + id + " has ended (" + control::JobStateName(job->state()) +
                              "): none of its ranks runs to be asked for its stacks");
  }
  const int n = static_cast<int>(job->status.ranks.size());
  std::set<int> chosen;
  for (int r : ranks) {
    if (r < 0 || r >= n) {
      return InvalidArgument(
          "rank " + std::to_string(r) + ": job " + id +
          (n == 0 ? std::string(" has no ranks yet") : " has ranks 0 to " + std::to_string(n - 1)));
    }
    chosen.insert(r);
  }
  if (ranks.empty()) {
    for (int r = 0; r < n; ++r) chosen.insert(r);
  }
  *asked = job->AskForStacks(chosen, why, /*once_per_stall=*/false);
  if (!asked->empty()) job->Changed(/*marker=*/false);  // watchers read the note
  SendStackDumpsLocked(*job);
  return Status::OK();
}

void JobManager::Schedule() {
  base::MutexLock lock(&mu_);
  ScheduleLocked();
}

void JobManager::ScheduleLocked() {
  // Starting or failing a job can free slots and ask for another pass; run passes here instead of
  // recursing, and never over the table itself (finishing a job may prune it).
  if (scheduling_) {
    reschedule_ = true;
    return;
  }
  // No job waits for placement: a pass would walk every live rank (BusySlots) for nothing, and
  // this runs after every rank exit (issue 22). O(jobs).
  if (!table_.AnyPending()) {
    GrowLocked(/*force=*/false);  // elastic jobs take free slots only when nobody queues
    return;
  }
  scheduling_ = true;
  for (int pass = 0; pass < 8 && !shutdown_; ++pass) {
    reschedule_ = false;
    Scheduler::Pass view = scheduler_.BeginPass(table_.jobs());
    std::vector<JobPtr> pending;
    for (const JobPtr& job : table_.jobs()) {
      if (job->state() == JobState::kPending) pending.push_back(job);
    }
    for (const JobPtr& job : pending) {
      if (job->state() != JobState::kPending) continue;
      const Scheduler::Outcome outcome = scheduler_.Advance(*job, &view, Instant::Now());
      watch_.Notify(job->id());  // "agents ready n/N" may have been logged
      if (outcome == Scheduler::Outcome::kStarted) PublishMembershipLocked(*job);
      if (outcome == Scheduler::Outcome::kFailed) SettleLocked(*job);
    }
    if (!reschedule_) break;
  }
  scheduling_ = false;
  GrowLocked(/*force=*/false);  // what the queue left
}

void JobManager::GrowLocked(bool force) {
  // Jobs waiting in the queue come first (submit order): growth takes what they leave, but for a
  // job whose workers wait to leave its discovery list (Job::ShrinkWaiting).
  if (scheduling_) return;
  const bool queued = table_.AnyPending();
  // A pass walks every live rank (BusySlots, issue 22): at most one per 50 ms from the events
  // that schedule (after a big job, one per agent report), the supervisor's tick catches up.
  const auto now = std::chrono::steady_clock::now();
  if (!force && now - last_growth_pass_ < std::chrono::milliseconds(50)) return;
  std::vector<JobPtr> growing;
  for (const JobPtr& job : table_.jobs()) {
    // A job whose workers wait to leave the list grows before the queue: nothing else frees them.
    if (job->ElasticWantsWorkers() && (!queued || job->ShrinkWaiting())) growing.push_back(job);
  }
  if (growing.empty()) return;  // the pass below walks every live rank: only when needed
  last_growth_pass_ = now;
  scheduling_ = true;
  Scheduler::Pass view = scheduler_.BeginPass(table_.jobs());
  for (const JobPtr& job : growing) {
    if (!scheduler_.Grow(*job, &view, Instant::Now())) continue;
    if (job->state() != JobState::kRunning) {  // passed --reset-limit: failed, or restarting
      SettleLocked(*job);
      continue;
    }
    PublishMembershipLocked(*job);
    watch_.Notify(job->id());
  }
  scheduling_ = false;
}

void JobManager::OnMasterPort(const std::string& agent_id, const MasterPortAnswer& answer) {
  base::MutexLock lock(&mu_);
  OnMasterPortLocked(agent_id, answer);
}

void JobManager::OnMasterPortLocked(const std::string& agent_id, const MasterPortAnswer& answer) {
  const Instant now = Instant::Now();
  for (const JobPtr& job : table_.jobs()) {
    switch (scheduler_.OnMasterPort(*job, agent_id, answer, now)) {
      case Scheduler::Answer::kNotThisJob:
        continue;
      case Scheduler::Answer::kIgnored:
        return;
      case Scheduler::Answer::kTaken:
        ScheduleLocked();  // starts the job, or fails it with the agent's error
        return;
    }
  }
}

Status JobManager::NextEvents(const std::string& id, int64_t from_seq, bool follow,
                              std::chrono::milliseconds wait, WatchCursor* cursor,
                              std::vector<JobEvent>* events, bool* done) {
  base::MutexLock lock(&mu_);
  JobPtr job = table_.Find(id);  // held: the job may be pruned from the table while we wait
  if (!job) return NotFound(NoJob(id) + "; list jobs with: hvdrun list");
  *done = false;
  if (!cursor->started) {
    watch_.Begin(*job, from_seq, cursor, events);
  } else if (follow) {
    watch_.Wait(lock, *job, *cursor, wait);
  }
  watch_.AddEvents(*job, from_seq, follow, cursor, events, done);
  return Status::OK();
}

bool JobManager::ResolveSecret(const std::string& secret, std::string* prefix) const {
  return secrets_.Resolve(secret, prefix);
}

JobCounts JobManager::Counts() const {
  base::MutexLock lock(&mu_);
  JobCounts c;
  for (const JobPtr& job : table_.jobs()) {
    ++c.jobs[job->state()];
    for (const RankStatus& r : job->status.ranks) c.ranks_running += r.state == RankState::kRunning;
  }
  for (const auto& [agent, slots] : Scheduler::BusySlots(table_.jobs())) {
    c.slots_in_use[agent] = static_cast<int>(slots.size());
  }
  return c;
}

void JobManager::Shutdown(const std::string& reason) {
  base::MutexLock lock(&mu_);
  if (shutdown_) return;
  shutdown_ = true;
  std::vector<JobPtr> jobs = table_.jobs();
  for (const JobPtr& job : jobs) {
    if (!job->terminal()) {
      EndLocked(*job, JobState::kCancelled, reason, control::kCancelledExitCode);
    }
  }
  table_.Flush();
}

bool JobManager::WaitRanksGone(std::chrono::milliseconds timeout) {
  base::MutexLock lock(&mu_);
  return watch_.WaitFinished(lock, timeout, [&] {
    mu_.AssertHeld();  // the wait holds the lock whenever it asks
    for (const JobPtr& job : table_.jobs()) {
      if (job->terminal() && !job->finished) return false;
    }
    return true;
  });
}

void JobManager::CloseWatches() {
  base::MutexLock lock(&mu_);
  watch_.CloseAll();
}

std::vector<AgentInfo> AgentsWithSlotsInUse(const AgentRegistry& agents, const JobManager& jobs) {
  std::vector<AgentInfo> list = agents.List();
  const JobCounts counts = jobs.Snapshot()->counts;  // never waits for the manager's lock
  for (AgentInfo& a : list) {
    auto it = counts.slots_in_use.find(a.id);
    a.slots_in_use = it == counts.slots_in_use.end() ? 0 : it->second;
  }
  return list;
}

}  // namespace hvd::launcherd
