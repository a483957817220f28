// An elastic job growing (docs/elastic.md): when agents register or slots free up, a RUNNING
// elastic job below --max-np gets workers on the free slots it may use, and a generation that
// adds them. The new workers join that generation at once and wait in hvd::Init() for the
// others, which move to it at their next commit (State.commit -> check_host_updates ->
// HostsUpdatedInterrupt -> reset), as under Horovod Elastic.
#include <algorithm>

#include "launcherd/job_scheduler.h"

namespace hvd::launcherd {

bool Job::ElasticWantsWorkers() const {
  if (!elastic() || status.state != JobState::kRunning || elastic_finishing_) return false;
  return Tally().live < status.spec.max_np;
}

bool Job::ElasticSlotUsable(const std::string& agent_id, const std::string& host, int slot) const {
  return !excluded_hosts_.count(host) && !dropped_slots_.count({agent_id, slot});
}

void Job::ElasticGrew(const std::vector<int>& ids, Instant now) {
  RanksReplaced();
  std::vector<int> live;
  for (const RankStatus& r : status.ranks) {
    if (RankLive(r.state)) live.push_back(r.placement.rank);
  }
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
  NewGeneration(std::move(live),
                "generation " + std::to_string(status.elastic.generation + 1) + ": worker" +
                    (ids.size() == 1 ? " " : "s ") + who + " joined; " + std::to_string(n) +
                    " workers (--max-np " + std::to_string(status.spec.max_np) + ")",
                now);
}

bool Scheduler::Grow(Job& job, Pass* pass, Instant now) {
  if (!job.ElasticWantsWorkers()) return false;
  const control::JobSpec& spec = job.status.spec;
  int live = 0;
  std::map<std::string, int> live_on_host;
  for (const RankStatus& r : job.status.ranks) {
    if (!RankLive(r.state)) continue;
    ++live;
    ++live_on_host[r.placement.host];
  }
  int want = spec.max_np - live;
  // With -H, only the named hosts, each up to its count.
  auto allowance = [&](const control::AgentSlots& a) -> int {
    if (spec.hosts.empty()) return want;
    for (const control::HostRequest& h : spec.hosts) {
      if (h.host == a.host || h.host == a.advertise_addr) {
        return std::max(0, h.slots - live_on_host[a.host]);
      }
    }
    return 0;
  };
  std::vector<int> added;
  std::map<std::string, std::string> job_env = spec.env;
  for (control::AgentSlots& a : pass->agents) {
    if (want <= 0) break;
    int may = std::min(want, allowance(a));
    std::set<int>& busy = pass->busy[a.id];
    for (int slot = 0; slot < a.slots && may > 0; ++slot) {
      if (busy.count(slot) || !job.ElasticSlotUsable(a.id, a.host, slot)) continue;
      RankStatus r;
      r.placement.rank = static_cast<int>(job.status.ranks.size());
      r.placement.agent_id = a.id;
      r.placement.host = a.host;
      r.placement.slot = slot;
      // Local and cross numbers are the runtime's to derive in an elastic job (they change).
      r.placement.local_size = 1;
      r.placement.cross_size = 1;
      std::shared_ptr<AgentLink> link = agents_->Link(a.id);
      const control::WorkerEnvInput in =
          EnvInput(job, r, a.advertise_addr, live + static_cast<int>(added.size()) + 1, job_env);
      if (!link || !link->SendStartRank(CommandFor(job, r, in))) break;  // its stream ended
      r.state = RankState::kStarting;
      job.status.ranks.push_back(r);
      busy.insert(slot);
      a.busy.insert(slot);
      ++live_on_host[a.host];
      added.push_back(r.placement.rank);
      --may;
      --want;
    }
  }
  if (added.empty()) return false;
  job.ElasticGrew(added, now);  // logs the event
  return true;
}

}  // namespace hvd::launcherd
