// Scheduler: placement (step 1) and start (step 4). The network check is in job_network.cc, the
// MASTER_PORT step in job_master_port.cc.
#include "launcherd/job_scheduler.h"

#include "base/logging.h"
#include "control/log_escape.h"
#include "control/worker_env.h"

namespace hvd::launcherd {

std::map<std::string, std::set<int>> Scheduler::BusySlots(
    const std::vector<std::shared_ptr<Job>>& jobs) {
  std::map<std::string, std::set<int>> busy;
  for (const auto& job : jobs) {
    if (job->finished) continue;
    for (const RankStatus& r : job->status.ranks) {
      if (RankLive(r.state)) busy[r.placement.agent_id].insert(r.placement.slot);
    }
  }
  return busy;
}

Scheduler::Pass Scheduler::BeginPass(const std::vector<std::shared_ptr<Job>>& jobs) const {
  Pass pass{agents_->Schedulable(), BusySlots(jobs), {}, {}};
  for (size_t i = 0; i < pass.agents.size(); ++i) {
    control::AgentSlots& a = pass.agents[i];
    auto it = pass.busy.find(a.id);
    if (it != pass.busy.end()) a.busy = it->second;
    pass.index[a.id] = i;
  }
  return pass;
}

namespace {

// Scheduler::StillValid over `agents` indexed by id.
bool ValidOn(const control::PlacementResult& placement,
             const std::vector<control::AgentSlots>& agents,
             const std::map<std::string, size_t>& index) {
  if (placement.outcome != control::PlacementOutcome::kPlaced || placement.ranks.empty()) {
    return false;
  }
  for (const control::RankSlot& s : placement.ranks) {
    auto it = index.find(s.agent_id);
    if (it == index.end()) return false;
    const control::AgentSlots& a = agents[it->second];
    if (a.host != s.host || s.slot < 0 || s.slot >= a.slots || a.busy.count(s.slot)) return false;
  }
  return true;
}

}  // namespace

bool Scheduler::StillValid(const control::PlacementResult& placement,
                           const std::vector<control::AgentSlots>& agents) {
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < agents.size(); ++i) index[agents[i].id] = i;
  return ValidOn(placement, agents, index);
}

control::PlacementResult Scheduler::PlaceInPass(const Job& job, Pass* pass) {
  if (job.placing && ValidOn(job.placing->placement, pass->agents, pass->index)) {
    return job.placing->placement;
  }
  control::PlacementRequest req;
  req.np = job.status.spec.np;
  req.hosts = job.status.spec.hosts;
  if (!req.hosts.empty()) return control::Place(pass->agents, req);
  auto it = pass->placed_by_np.find(req.np);
  if (it == pass->placed_by_np.end()) {
    it = pass->placed_by_np.emplace(req.np, control::Place(pass->agents, req)).first;
  }
  return it->second;
}

control::PlacementResult Scheduler::PlaceStep(const Job& job,
                                              const std::vector<control::AgentSlots>& agents) {
  if (job.placing && StillValid(job.placing->placement, agents)) return job.placing->placement;
  control::PlacementRequest req;
  req.np = job.status.spec.np;
  req.hosts = job.status.spec.hosts;
  return control::Place(agents, req);
}

void Scheduler::Hold(Job& job, control::PlacementResult placement, Instant now) const {
  if (!job.placing) {
    job.placing.emplace();
    job.placing->since_ms = now.wall_ms;
  }
  job.placing->placement = std::move(placement);
}

void Scheduler::GiveUp(Job& job, Instant now) const {
  if (!job.placing) return;
  if (job.status.queued_since_ms > 0) {
    job.status.queued_since_ms += now.wall_ms - job.placing->since_ms;
  }
  job.placing.reset();
}

Scheduler::Outcome Scheduler::Advance(Job& job, Pass* pass, Instant now) {
  control::PlacementResult r = PlaceInPass(job, pass);
  ReportAgentsReady(job, pass->agents);
  switch (r.outcome) {
    case control::PlacementOutcome::kPlaced:
      break;
    case control::PlacementOutcome::kWait:
      GiveUp(job, now);
      if (job.status.reason != r.reason) {
        job.status.reason = r.reason;
        job.Changed(/*marker=*/true);
      }
      return Outcome::kWaiting;
    case control::PlacementOutcome::kNeverFits: {
      JobFailure f;
      f.message = "cannot place the job: " + r.reason;
      job.Fail(f, control::kGenericFailureExitCode, now, /*permanent=*/true);
      return Outcome::kFailed;
    }
  }
  Hold(job, std::move(r), now);
  Step step = NetworkStep(job, now);
  if (step == Step::kReady) step = MasterPortStep(job, now);
  if (step == Step::kWait) return Outcome::kWaiting;
  if (step == Step::kFailed) return Outcome::kFailed;
  for (const control::RankSlot& s : job.placing->placement.ranks) {
    pass->busy[s.agent_id].insert(s.slot);
    auto it = pass->index.find(s.agent_id);
    if (it != pass->index.end()) pass->agents[it->second].busy.insert(s.slot);
  }
  pass->placed_by_np.clear();  // those slots are taken now
  return Start(job, pass->agents, now) ? Outcome::kStarted : Outcome::kFailed;
}

void Scheduler::ReportAgentsReady(Job& job, const std::vector<control::AgentSlots>& agents) const {
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
}

std::map<std::string, std::string> Scheduler::JobEnv(const Job& job) const {
  // The runtime's own wait at start-up outlasts the launcher's, whose message names hosts and
  // reasons; with no launcher limit the runtime's default stands.
  std::map<std::string, std::string> job_env = job.status.spec.env;
  const auto start_timeout = OrDefault(job.status.spec.start_timeout_ms, options_.start_timeout);
  if (start_timeout.count() > 0 && !job_env.count("HVD_START_TIMEOUT_SECONDS")) {
    job_env["HVD_START_TIMEOUT_SECONDS"] = std::to_string(start_timeout.count() / 1000 + 10);
  }
  return job_env;
}

control::WorkerEnvInput Scheduler::EnvInput(
    const Job& job, const RankStatus& r, const std::string& advertise_addr, int size,
    const std::map<std::string, std::string>& job_env) const {
  control::WorkerEnvInput in;
  in.placement = r.placement;
  in.size = size;
  in.rendezvous_address = options_.rendezvous_address;
  in.rendezvous_tls = options_.rendezvous_tls;
  in.job_id = job.id();
  in.attempt = job.status.attempt;
  in.job_secret = job.secret;
  in.advertise_addr = advertise_addr;
  control::ChoiceFor(job.status.network, r.placement.agent_id, &in.advertise_addr, &in.iface);
  in.job_env = job_env;
  in.max_restarts = job.status.spec.max_restarts;
  in.elastic = control::IsElastic(job.status.spec);
  in.elastic_timeout_ms = job.status.spec.elastic_timeout_ms;
  in.reset_limit = job.status.spec.reset_limit;
  return in;
}

StartRankCommand Scheduler::CommandFor(const Job& job, const RankStatus& r,
                                       const control::WorkerEnvInput& in) const {
  StartRankCommand cmd;
  cmd.job_id = job.id();
  cmd.attempt = job.status.attempt;
  cmd.placement = r.placement;
  cmd.argv = job.status.spec.argv;
  cmd.env = control::WorkerEnv(in);
  cmd.working_dir = job.status.spec.working_dir;
  cmd.forward_stdin = job.status.spec.stdin_rank == r.placement.rank;
  cmd.run_as = job.status.spec.run_as;
  cmd.gpu_isolation = job.status.spec.gpu_isolation;
  return cmd;
}

bool Scheduler::Start(Job& job, const std::vector<control::AgentSlots>& agents, Instant now) {
  const control::PlacementResult placement = std::move(job.placing->placement);
  const int master_port = job.placing->master_port.port;
  job.placing.reset();  // started: no longer placed and pending
  std::map<std::string, const control::AgentSlots*> agent_by_id;
  for (const control::AgentSlots& a : agents) agent_by_id[a.id] = &a;
  std::set<std::string> used;
  job.status.ranks.clear();
  for (const control::RankSlot& s : placement.ranks) {
    RankStatus r;
    r.placement = s;
    r.state = RankState::kPending;  // kStarting once sent; a rank never sent holds no slot
    job.status.ranks.push_back(r);
    used.insert(s.agent_id);
  }
  job.status.start_time_ms = now.wall_ms;
  job.attempt_started = now.steady;
  job.at_rendezvous = 0;
  job.start_timeout_waived = false;
  job.rendezvous_restored = false;
  const int np = job.status.spec.np;
  const std::map<std::string, std::string> job_env = JobEnv(job);
  job.SetState(JobState::kStarting,
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
    control::WorkerEnvInput in =
        EnvInput(job, r, agent_by_id.at(r.placement.agent_id)->advertise_addr, np, job_env);
    in.group_rank = group_of[r.placement.rank];
    in.group_world_size = groups;
    in.master_addr = master_addr;
    in.master_port = master_port;
    std::shared_ptr<AgentLink> link = agents_->Link(r.placement.agent_id);
    if (link && link->SendStartRank(CommandFor(job, r, in))) {
      r.state = RankState::kStarting;
      continue;
    }
    // The agent's stream ended between placement and now.
    r.state = RankState::kFailedToStart;
    r.error = "agent " + r.placement.agent_id + " disconnected before it received the rank";
    r.end_time_ms = now.wall_ms;
    job.RanksReplaced();  // set here, not through the job: its counts are taken afresh
    JobFailure f;
    f.rank = r.placement.rank;
    f.host = r.placement.host;
    f.message = "rank " + std::to_string(f.rank) + " on " + f.host + " could not start: " + r.error;
    job.Fail(f, control::kGenericFailureExitCode, now);
    return false;
  }
  job.RanksReplaced();
  job.ElasticBegin(now);          // generation 0: every worker just started
  job.Changed(/*marker=*/false);  // its ranks are STARTING now: written at once (job_table.h)
  HVD_LOG(INFO) << "job " << job.id() << ": " << control::LogEscape(job.status.reason, 1024);
  return true;
}

}  // namespace hvd::launcherd
