#include "control/placement.h"

#include <algorithm>
#include <map>

namespace hvd::control {
namespace {

std::string Count(int64_t n, const char* noun) {
  return std::to_string(n) + " " + noun + (n == 1 ? "" : "s");
}

// How many slots of `a` are free, leaving out those `taken` in this placement already. O(busy +
// taken), never O(slots): an agent may register with up to kMaxSlotsPerHost slots, and nothing
// here may cost more than the ranks placed and the hosts and agents looked at.
int64_t FreeCount(const AgentSlots& a, const std::set<int>& taken) {
  int64_t used = 0;
  for (int s : a.busy) used += s >= 0 && s < a.slots;
  for (int s : taken) used += s >= 0 && s < a.slots && !a.busy.count(s);
  return std::max<int64_t>(0, a.slots - used);
}

// The lowest `want` free slot indices of `a` (at most FreeCount of them), lowest first. Every index
// skipped is busy or taken, so this costs O(want + busy + taken) whatever a.slots is.
std::vector<int> LowestFree(const AgentSlots& a, const std::set<int>& taken, int64_t want) {
  want = std::min(want, FreeCount(a, taken));
  std::vector<int> free;
  free.reserve(static_cast<size_t>(std::max<int64_t>(0, want)));
  for (int s = 0; s < a.slots && static_cast<int64_t>(free.size()) < want; ++s) {
    if (!a.busy.count(s) && !taken.count(s)) free.push_back(s);
  }
  return free;
}

std::vector<const AgentSlots*> InRegistrationOrder(const std::vector<AgentSlots>& agents) {
  std::vector<const AgentSlots*> out;
  for (const AgentSlots& a : agents) out.push_back(&a);
  std::stable_sort(out.begin(), out.end(),
                   [](const AgentSlots* x, const AgentSlots* y) { return x->order < y->order; });
  return out;
}

// "registered: a, b", at most kListedHosts names: the reason is one line whatever the cluster.
constexpr size_t kListedHosts = 8;
std::string HostList(const std::vector<const AgentSlots*>& agents) {
  if (agents.empty()) return "no agent registered";
  std::string s = "registered: ";
  std::set<std::string> seen;
  for (const AgentSlots* a : agents) {
    if (seen.count(a->host)) continue;
    if (seen.size() == kListedHosts) {
      s += ", ...";
      break;
    }
    seen.insert(a->host);
    s += (seen.size() > 1 ? ", " : "") + a->host;
  }
  return s;
}

PlacementResult Wait(std::string reason) {
  return {PlacementOutcome::kWait, std::move(reason), {}};
}
PlacementResult Never(std::string reason) {
  return {PlacementOutcome::kNeverFits, std::move(reason), {}};
}

PlacementResult PlaceAnywhere(const std::vector<const AgentSlots*>& agents, int np) {
  int64_t free = 0, total = 0;
  for (const AgentSlots* a : agents) {
    free += FreeCount(*a, {});
    total += a->slots;
  }
  if (free < np) {
    if (agents.empty()) return Wait("needs " + Count(np, "slot") + "; no agent registered");
    return Wait("needs " + Count(np, "slot") + "; " + std::to_string(free) + " free on " +
                Count(static_cast<int>(agents.size()), "agent") + " (" + std::to_string(total) +
                " in total)");
  }
  PlacementResult r{PlacementOutcome::kPlaced, "", {}};
  r.ranks.reserve(np);
  for (const AgentSlots* a : agents) {
    if (static_cast<int>(r.ranks.size()) == np) break;
    for (int s : LowestFree(*a, {}, np - static_cast<int64_t>(r.ranks.size()))) {
      RankSlot rs;
      rs.rank = static_cast<int>(r.ranks.size());
      rs.agent_id = a->id;
      rs.host = a->host;
      rs.slot = s;
      r.ranks.push_back(rs);
    }
  }
  return r;
}

PlacementResult PlaceOnHosts(const std::vector<const AgentSlots*>& agents,
                             const PlacementRequest& req) {
  int64_t sum = 0;
  std::string listed;
  std::set<std::string> names;
  for (const HostRequest& h : req.hosts) {
    if (h.slots < 1) {
      return Never("host " + h.host + " is given " + std::to_string(h.slots) +
                   " slots in the host list; give each host at least 1 (-H host:N)");
    }
    if (!names.insert(h.host).second) {
      return Never("host " + h.host +
                   " appears twice in the host list; name it once with its total slots");
    }
    sum += h.slots;
    listed += (listed.empty() ? "" : ",") + h.host + ":" + std::to_string(h.slots);
  }
  if (sum < req.np) {
    return Never("np=" + std::to_string(req.np) + " but the host list " + listed + " gives only " +
                 Count(sum, "slot") + "; raise the hosts' slots or lower np");
  }

  // Ranks per host, host-major, then the slots that take them. Impossible requests are reported
  // before waits: waiting for a request that can never be met would hang the job forever.
  std::map<std::string, std::set<int>> taken;  // agent id -> slots taken by this placement
  std::vector<std::string> waits;
  std::string registered;  // HostList(agents), once
  std::vector<RankSlot> ranks;
  // The agents serving each name (host name or advertise address), in registration order: one
  // pass over the agents instead of one per host of the request.
  std::map<std::string, std::vector<const AgentSlots*>> by_host;
  for (const AgentSlots* a : agents) {
    by_host[a->host].push_back(a);
    if (!a->advertise_addr.empty() && a->advertise_addr != a->host) {
      by_host[a->advertise_addr].push_back(a);
    }
  }
  int remaining = req.np;
  for (const HostRequest& h : req.hosts) {
    const int need = std::min(h.slots, remaining);
    remaining -= need;
    if (need == 0) break;
    auto found = by_host.find(h.host);
    if (found == by_host.end()) {
      if (registered.empty()) registered = HostList(agents);
      waits.push_back("no agent on host " + h.host + " yet (" + registered + ")");
      continue;
    }
    const std::vector<const AgentSlots*>& serving = found->second;
    int64_t capacity = 0;
    for (const AgentSlots* a : serving) capacity += a->slots;
    if (capacity < need) {
      return Never("host " + h.host + " must take " + Count(need, "rank") + " but its " +
                   (serving.size() == 1 ? "agent has " : "agents have ") + Count(capacity, "slot") +
                   "; lower its count in the host list");
    }
    int64_t free = 0;
    std::vector<RankSlot> here;
    for (const AgentSlots* a : serving) {
      const std::set<int>& mine = taken[a->id];
      free += FreeCount(*a, mine);
      for (int s : LowestFree(*a, mine, need - static_cast<int64_t>(here.size()))) {
        RankSlot rs;
        rs.agent_id = a->id;
        rs.host = a->host;
        rs.slot = s;
        here.push_back(rs);
      }
    }
    if (free < need) {
      waits.push_back("host " + h.host + " needs " + Count(need, "slot") + "; " +
                      std::to_string(free) + " free on " +
                      Count(static_cast<int>(serving.size()), "agent"));
      continue;
    }
    for (RankSlot& rs : here) {
      taken[rs.agent_id].insert(rs.slot);
      rs.rank = static_cast<int>(ranks.size());
      ranks.push_back(rs);
    }
  }
  if (!waits.empty()) {
    // One line: the first few waits, then how many more.
    constexpr size_t kListedWaits = 4;
    std::string reason;
    for (size_t i = 0; i < waits.size() && i < kListedWaits; ++i) {
      reason += (reason.empty() ? "" : "; ") + waits[i];
    }
    if (waits.size() > kListedWaits) {
      reason += "; and " + std::to_string(waits.size() - kListedWaits) + " more hosts waiting";
    }
    return Wait(reason);
  }
  return {PlacementOutcome::kPlaced, "", std::move(ranks)};
}

}  // namespace

void ComputeLocalAndCrossRanks(std::vector<RankSlot>* ranks) {
  // O(ranks log hosts): a job may have up to a million ranks on as many hosts.
  std::map<std::string, int> on_host;  // host -> ranks on it
  std::vector<std::string> hosts;      // in order of their first rank, as Horovod orders them
  for (RankSlot& r : *ranks) {
    int& n = on_host[r.host];
    if (n == 0) hosts.push_back(r.host);
    r.local_rank = n++;
  }
  // cross_rank of (host, local_rank L): how many earlier hosts have a rank with local_rank L;
  // cross_size of L: how many hosts do. Walking hosts in order, a counter per L gives both, and
  // the walk visits each (host, L) once: as many steps as ranks.
  std::vector<int> seen;                  // local_rank -> hosts so far having it
  std::map<std::string, int> host_index;  // host -> its position in `hosts`
  std::vector<std::vector<int>> cross(hosts.size());
  for (size_t h = 0; h < hosts.size(); ++h) {
    const int n = on_host[hosts[h]];
    host_index[hosts[h]] = static_cast<int>(h);
    if (static_cast<int>(seen.size()) < n) seen.resize(n, 0);
    cross[h].resize(n);
    for (int l = 0; l < n; ++l) cross[h][l] = seen[l]++;
  }
  for (RankSlot& r : *ranks) {
    r.local_size = on_host[r.host];
    r.cross_rank = cross[host_index[r.host]][r.local_rank];
    r.cross_size = seen[r.local_rank];
  }
}

PlacementResult Place(const std::vector<AgentSlots>& agents, const PlacementRequest& request) {
  if (request.np < 1) {
    return Never("np=" + std::to_string(request.np) + ": a job needs at least 1 rank");
  }
  const std::vector<const AgentSlots*> ordered = InRegistrationOrder(agents);
  PlacementResult r =
      request.hosts.empty() ? PlaceAnywhere(ordered, request.np) : PlaceOnHosts(ordered, request);
  if (r.outcome == PlacementOutcome::kPlaced) ComputeLocalAndCrossRanks(&r.ranks);
  return r;
}

}  // namespace hvd::control
