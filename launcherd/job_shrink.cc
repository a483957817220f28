// An elastic job shrinking by its discovery script (docs/elastic.md "Shrinking"): when the
// script's list no longer names a host, or gives it fewer slots than the job's workers there,
// the workers beyond it are stopped (RemoveWorkers, not as failures: their slots stay usable and
// their host is not held against) and the others re-form without them, as after a loss.
//
// Vocabulary:
//   beyond  - a live worker on a host the list does not name, or above a named host's slots
//             (the newest workers of that host first: the oldest keep rank 0 and its state).
//   holder  - a worker that holds the training state: one started with the job (its workers
//             all begin from the same state and train together), or one that committed after it
//             joined (base::RankKeyKind::kCommitted: its state was synced from a holder, then
//             saved). A new worker that has not committed holds only its initial model: a
//             failure makes it restore that (hvd.elastic's TorchState, as Horovod's, saves at
//             commit() only, not at sync()).
// Why the holder rule: the stop fails the others' collectives, they restore their last commit
// and sync from rank 0 of the next generation, the lowest worker id that stays. Unless that
// worker is a holder, the job would go on from its initial model, silently. Horovod fails the
// job when no host of the previous set stays ("No hosts from previous set remaining"); hvd keeps
// the workers beyond the list until the next rank 0 holds the state (a new host's workers
// commit once), then stops them.
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "launcherd/job.h"

namespace hvd::launcherd {

std::map<int, std::string> Job::WorkersBeyondHosts(
    const std::map<std::string, std::string>& advertise) const {
  std::map<int, std::string> beyond;
  const std::vector<control::HostRequest>& hosts = status.spec.hosts;
  if (!ReForms() || hosts.empty()) return beyond;
  std::map<std::string, const control::HostRequest*> listed;  // by the name the list gives
  for (const control::HostRequest& h : hosts) listed.emplace(h.host, &h);
  std::map<std::string, std::vector<int>> on_host;  // the staying workers, oldest first
  for (int id : StayingWorkers()) on_host[status.ranks[id].placement.host].push_back(id);
  for (const auto& [host, ids] : on_host) {
    auto it = listed.find(host);
    for (size_t i = 0; i < ids.size() && it == listed.end(); ++i) {
      // Or by an address one of its agents advertises.
      auto a = advertise.find(status.ranks[ids[i]].placement.agent_id);
      if (a != advertise.end()) it = listed.find(a->second);
    }
    const int keep = it == listed.end() ? 0 : it->second->slots;
    if (static_cast<int>(ids.size()) <= keep) continue;
    const std::string why =
        it == listed.end()
            ? "its host " + host + " is not in --host-discovery-script's list any more"
            : host + " has " + std::to_string(keep) + " slot" + (keep == 1 ? "" : "s") +
                  " in --host-discovery-script's list now, and " + std::to_string(ids.size()) +
                  " of the job's workers";
    for (size_t i = static_cast<size_t>(keep); i < ids.size(); ++i) beyond[ids[i]] = why;
  }
  // Above --max-np: the listed hosts' workers started while others waited to leave, and a later
  // answer gave those back their room. The newest go.
  std::vector<int> staying;
  for (int id : StayingWorkers()) {
    if (!beyond.count(id)) staying.push_back(id);
  }
  const int max_np = status.spec.max_np;
  for (int i = static_cast<int>(staying.size()) - 1; i >= max_np && max_np > 0; --i) {
    beyond[staying[i]] = "the job has " + std::to_string(staying.size()) +
                         " workers on the listed hosts, above --max-np " + std::to_string(max_np);
  }
  return beyond;
}

bool Job::ShrinkTo(const std::map<int, std::string>& beyond, Instant now) {
  const JobState state = status.state;
  if (beyond.empty() || !ReForms() || elastic_finishing_ ||
      (state != JobState::kRunning && state != JobState::kStarting)) {
    shrink_pending_ = false;
    shrink_waiting_.clear();
    return false;
  }
  int next_rank0 = -1;  // the lowest worker id that stays
  for (int id : StayingWorkers()) {
    if (!beyond.count(id)) {
      next_rank0 = id;
      break;
    }
  }
  const bool holder =
      next_rank0 >= 0 && (next_rank0 < status.spec.np || committed_.count(next_rank0));
  if (!holder) {
    std::set<int> waiting;
    for (const auto& [id, why] : beyond) waiting.insert(id);
    if (!shrink_pending_ || waiting != shrink_waiting_) {  // said once for each set
      const std::vector<int> ids(waiting.begin(), waiting.end());
      const bool one = ids.size() == 1;
      AddMembershipEvent(
          "worker" + std::string(one ? " " : "s ") + RankList(ids, false) +
              (one ? " goes on though --host-discovery-script's list has no room for it"
                   : " go on though --host-discovery-script's list has no room for them") +
              " any more: " +
              (next_rank0 < 0
                   ? std::string("no other worker would stay; stopped once workers on the "
                                 "listed hosts hold the training state")
                   : "worker " + std::to_string(next_rank0) +
                         ", rank 0 after the stop, does not hold the training state yet (it "
                         "joined later and has not committed); stopped once it does"),
          now);
      Changed(/*marker=*/true);  // a membership event: watchers show it now
    }
    // They do not count against --max-np meanwhile: workers on the listed hosts must start.
    shrink_waiting_ = std::move(waiting);
    shrink_pending_ = true;
    return false;
  }
  const bool stopped = RemoveWorkers(beyond, kLeftTheList, now, /*failed=*/false);
  // RemoveWorkers skips a worker not yet in a published generation (one grown below --min-np):
  // it is stopped at a later try.
  shrink_waiting_.clear();
  shrink_pending_ = false;
  for (const auto& [id, why] : beyond) {
    if (!removing_.count(id) && RankLive(status.ranks[id].state)) shrink_pending_ = true;
  }
  return stopped;
}

int Job::WaitingToLeave() const {
  int n = 0;
  for (int id : shrink_waiting_) {
    n += id < static_cast<int>(status.ranks.size()) && RankLive(status.ranks[id].state) &&
         !removing_.count(id);
  }
  return n;
}

void Job::NoteCommitted(int worker) {
  if (worker >= 0 && worker < static_cast<int>(status.ranks.size())) committed_.insert(worker);
}

}  // namespace hvd::launcherd
