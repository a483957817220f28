// An elastic job growing (docs/elastic.md): when agents register or slots free up, a RUNNING
// elastic job below --max-np gets workers on the free slots it may use, and a generation that
// adds them. The new workers join that generation at once and wait in hvd::Init() for the
// others, which move to it at their next commit (State.commit -> check_host_updates ->
// HostsUpdatedInterrupt -> reset), as under Horovod Elastic.
#include <algorithm>
#include <climits>

#include "launcherd/job_scheduler.h"

namespace hvd::launcherd {

bool Job::ElasticWantsWorkers() const {
  if (!ReForms() || status.state != JobState::kRunning || elastic_finishing_) return false;
  return Tally().live - WaitingToLeave() < status.spec.max_np;
}

bool Job::ElasticSlotUsable(const std::string& agent_id, const std::string& host, int slot,
                            Clock::time_point now) const {
  auto it = excluded_hosts_.find(host);
  if (it != excluded_hosts_.end() && now < it->second) return false;
  return !dropped_slots_.count({agent_id, slot});
}

int Job::DroppedSlotsOn(const std::string& agent_id) const {
  int n = 0;
  for (auto it = dropped_slots_.lower_bound({agent_id, INT_MIN});
       it != dropped_slots_.end() && it->first == agent_id; ++it) {
    ++n;
  }
  return n;
}

void Job::ExcludeHost(const std::string& host, Clock::time_point now) {
  const int n = ++exclusions_[host];
  const auto& spec = status.spec;
  if (spec.cooldown_min_ms <= 0) {  // Horovod's default: for the job's life
    excluded_hosts_[host] = Clock::time_point::max();
    return;
  }
  // --blacklist-cooldown-range: MIN, doubling with each exclusion of the host, up to MAX.
  int64_t ms = spec.cooldown_min_ms;
  for (int i = 1; i < n && ms < spec.cooldown_max_ms; ++i) ms *= 2;
  ms = std::min(ms, spec.cooldown_max_ms);
  excluded_hosts_[host] = now + std::chrono::milliseconds(ms);
  log.AddProgress(host + " is left out of the job for " + std::to_string(ms / 1000) +
                  " s (--blacklist-cooldown-range)");
}

void Job::ElasticGrew(const std::vector<int>& ids, Instant now) {
  RanksReplaced();
  std::vector<int> live = StayingWorkers();  // not those being removed (they would be back)
  std::string who;
  for (size_t i = 0; i < ids.size() && i < 8; ++i) {
    const RankStatus& r = status.ranks[ids[i]];
    who += (i ? ", " : "") + std::to_string(ids[i]) + " on " + r.placement.host;
  }
  if (ids.size() > 8) who += " and " + std::to_string(ids.size() - 8) + " more";
  const size_t n = live.size();
  if (static_cast<int>(n) < status.spec.min_np) {  // still below: the survivors keep waiting
    AddMembershipEvent("worker" + std::string(ids.size() == 1 ? " " : "s ") + who + " joined; " +
                           std::to_string(n) + " workers, fewer than --min-np " +
                           std::to_string(status.spec.min_np),
                       now);
    Changed(/*marker=*/true);
    return;
  }
  // Before every first worker met, nobody re-forms: they meet in this generation directly, as
  // if the job had started with these workers (not a reset, as under Horovod).
  const bool reset = at_rendezvous >= status.spec.np;
  // A re-form like a loss's, so it counts against --reset-limit (as Horovod's driver counts
  // every reset); the limit was checked only on losses, and a growing job passed it freely.
  const int limit = status.spec.reset_limit;
  if (reset && limit > 0 && status.elastic.resets >= limit) {
    JobFailure f;
    f.rank = ids[0];
    f.host = status.ranks[ids[0]].placement.host;
    f.message = "worker" + std::string(ids.size() == 1 ? " " : "s ") + who + " joined; " +
                ResetLimitReached() + "; a worker joining re-forms the job too)";
    Fail(f, control::kGenericFailureExitCode, now);
    return;
  }
  std::string leaving;  // above --max-np until they go (job_shrink.cc)
  if (!shrink_waiting_.empty()) {
    const std::vector<int> w(shrink_waiting_.begin(), shrink_waiting_.end());
    leaving = "; worker" + std::string(w.size() == 1 ? " " : "s ") + RankList(w, false) +
              (w.size() == 1 ? " leaves" : " leave") + " the list once the new ones hold the state";
  }
  NewGeneration(std::move(live),
                "generation " + std::to_string(status.elastic.generation + 1) + ": worker" +
                    (ids.size() == 1 ? " " : "s ") + who + " joined; " + std::to_string(n) +
                    " workers (--max-np " + std::to_string(status.spec.max_np) + leaving + ")",
                now, reset);
}

bool Scheduler::Grow(Job& job, Pass* pass, Instant now) {
  if (!job.ElasticWantsWorkers()) return false;
  const control::JobSpec& spec = job.status.spec;
  int live = 0;
  std::map<std::string, int> live_on_host;
  for (const RankStatus& r : job.status.ranks) {
    if (!RankLive(r.state)) continue;
    // A worker being removed still holds its slot, but not its place in the next generation
    // (Job::StayingWorkers): the new workers' rank and size are counted without it.
    live += !job.BeingRemoved(r.placement.rank);
    ++live_on_host[r.placement.host];
  }
  // One beyond the host list keeps its place until the new ones hold the state, but not its
  // share of --max-np (the job runs above it until then).
  int want = spec.max_np - (live - job.WaitingToLeave());
  // With -H, only the named hosts, each up to its count.
  auto allowance = [&](const control::AgentSlots& a) -> int {
    if (spec.hosts.empty()) return want;
    for (const control::HostRequest& h : spec.hosts) {
      if (h.host == a.host || h.host == a.advertise_addr) {
        // A failed worker's slot is not used again: the host has one fewer for the job.
        return std::max(0, h.slots - live_on_host[a.host] - job.DroppedSlotsOn(a.id));
      }
    }
    return 0;
  };
  // The free slots it may take, first: the workers' environment describes the grown job.
  struct Pick {
    control::AgentSlots* agent;
    int slot;
  };
  std::vector<Pick> picks;
  std::map<std::string, int> on_host = live_on_host;
  for (control::AgentSlots& a : pass->agents) {
    if (want <= 0) break;
    int may = std::min(want, allowance(a));
    const std::set<int>& busy = pass->busy[a.id];
    for (int slot = 0; slot < a.slots && may > 0; ++slot) {
      if (busy.count(slot) || !job.ElasticSlotUsable(a.id, a.host, slot, now.steady)) continue;
      picks.push_back({&a, slot});
      ++on_host[a.host];
      --may;
      --want;
    }
  }
  const int size = live + static_cast<int>(picks.size());
  const std::map<std::string, std::string> job_env = JobEnv(job);
  std::vector<int> added;
  std::map<std::string, int> next_local = live_on_host;
  for (const Pick& p : picks) {
    control::AgentSlots& a = *p.agent;
    RankStatus r;
    r.placement.rank = static_cast<int>(job.status.ranks.size());  // its worker id
    r.placement.agent_id = a.id;
    r.placement.host = a.host;
    r.placement.slot = p.slot;
    r.placement.local_rank = next_local[a.host]++;
    r.placement.local_size = on_host[a.host];
    r.placement.cross_size = 1;
    control::WorkerEnvInput in = EnvInput(job, r, a.advertise_addr, size, job_env);
    in.elastic_rank = live + static_cast<int>(added.size());  // its rank in the new generation
    std::shared_ptr<AgentLink> link = agents_->Link(a.id);
    if (!link || !link->SendStartRank(CommandFor(job, r, in))) break;  // its stream ended
    r.state = RankState::kStarting;
    job.status.ranks.push_back(r);
    pass->busy[a.id].insert(p.slot);
    a.busy.insert(p.slot);
    added.push_back(r.placement.rank);
  }
  if (added.empty()) return false;
  job.ElasticGrew(added, now);  // logs the event
  return true;
}

bool Scheduler::CouldGrow(const Job& job, const Pass& pass, std::string* why) {
  if (pass.agents.empty()) return true;
  std::map<std::string, int> held;                // agent id -> slots its live workers hold
  for (const RankStatus& r : job.status.ranks) {  // not those the host list left out: no failure
    held[r.placement.agent_id] += RankLive(r.state) && !job.LeavingTheList(r.placement.rank);
  }
  int slots = 0, live = 0, failed = 0;
  std::vector<std::string> left_out;
  for (const control::AgentSlots& a : pass.agents) {
    if (job.HostLeftOutForGood(a.host)) {
      left_out.push_back(a.host);
      continue;
    }
    const int h = held[a.id], d = job.DroppedSlotsOn(a.id);
    if (a.slots - h - d > 0) return true;
    slots += a.slots;
    live += h;
    failed += d;
  }
  std::string text;
  if (slots > 0) {
    text = "the agents' " + std::to_string(slots) + " slot" + (slots == 1 ? "" : "s") + ": " +
           std::to_string(live) + " held by live workers, " + std::to_string(failed) +
           " of failed workers (a failed worker's slot is not used again)";
  }
  if (!left_out.empty()) {
    std::string hosts;
    for (size_t i = 0; i < left_out.size() && i < 8; ++i) hosts += (i ? ", " : "") + left_out[i];
    if (left_out.size() > 8) hosts += " and " + std::to_string(left_out.size() - 8) + " more";
    text += (text.empty() ? "" : "; ") + hosts + (left_out.size() == 1 ? " is" : " are") +
            " left out of the job for its life (two of its workers failed there, or its agent "
            "was lost; hvdrun --blacklist-cooldown-range lets a host come back)";
  }
  *why = text;
  return false;
}

}  // namespace hvd::launcherd
