#include "control/placement.h"

#include <algorithm>
#include <map>

namespace hvd::control {
namespace {

std::string Count(int n, const char* noun) {
  return std::to_string(n) + " " + noun + (n == 1 ? "" : "s");
}

bool Serves(const AgentSlots& a, const std::string& host) {
  return a.host == host || (!a.advertise_addr.empty() && a.advertise_addr == host);
}

// Free slot indices of `a`, lowest first, leaving out those `taken` in this placement already.
std::vector<int> FreeSlots(const AgentSlots& a, const std::set<int>& taken) {
  std::vector<int> free;
  for (int s = 0; s < a.slots; ++s) {
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

std::string HostList(const std::vector<const AgentSlots*>& agents) {
  if (agents.empty()) return "no agent registered";
  std::string s = "registered: ";
  std::set<std::string> seen;
  for (const AgentSlots* a : agents) {
    if (!seen.insert(a->host).second) continue;
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
  int free = 0, total = 0;
  for (const AgentSlots* a : agents) {
    free += static_cast<int>(FreeSlots(*a, {}).size());
    total += a->slots;
  }
  if (free < np) {
    if (agents.empty()) return Wait("needs " + Count(np, "slot") + "; no agent registered");
    return Wait("needs " + Count(np, "slot") + "; " + std::to_string(free) + " free on " +
                Count(static_cast<int>(agents.size()), "agent") + " (" + std::to_string(total) +
                " in total)");
  }
  PlacementResult r{PlacementOutcome::kPlaced, "", {}};
  for (const AgentSlots* a : agents) {
    for (int s : FreeSlots(*a, {})) {
      if (static_cast<int>(r.ranks.size()) == np) break;
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
  int sum = 0;
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
  std::vector<RankSlot> ranks;
  int remaining = req.np;
  for (const HostRequest& h : req.hosts) {
    const int need = std::min(h.slots, remaining);
    remaining -= need;
    if (need == 0) break;
    std::vector<const AgentSlots*> serving;
    int capacity = 0;
    for (const AgentSlots* a : agents) {
      if (!Serves(*a, h.host)) continue;
      serving.push_back(a);
      capacity += a->slots;
    }
    if (serving.empty()) {
      waits.push_back("no agent on host " + h.host + " yet (" + HostList(agents) + ")");
      continue;
    }
    if (capacity < need) {
      return Never("host " + h.host + " must take " + Count(need, "rank") + " but its " +
                   (serving.size() == 1 ? "agent has " : "agents have ") + Count(capacity, "slot") +
                   "; lower its count in the host list");
    }
    int free = 0;
    std::vector<RankSlot> here;
    for (const AgentSlots* a : serving) {
      for (int s : FreeSlots(*a, taken[a->id])) {
        ++free;
        if (static_cast<int>(here.size()) == need) continue;
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
    std::string reason;
    for (const std::string& w : waits) reason += (reason.empty() ? "" : "; ") + w;
    return Wait(reason);
  }
  return {PlacementOutcome::kPlaced, "", std::move(ranks)};
}

}  // namespace

void ComputeLocalAndCrossRanks(std::vector<RankSlot>* ranks) {
  std::map<std::string, int> on_host;     // host -> ranks on it
  std::map<std::string, int> host_index;  // host -> order of its first rank
  for (RankSlot& r : *ranks) {
    r.local_rank = on_host[r.host]++;
    host_index.emplace(r.host, static_cast<int>(host_index.size()));
  }
  // Hosts in order of their first rank, as Horovod orders them.
  std::vector<std::string> hosts(host_index.size());
  for (const auto& [host, index] : host_index) hosts[index] = host;
  for (RankSlot& r : *ranks) {
    r.local_size = on_host[r.host];
    r.cross_rank = 0;
    r.cross_size = 0;
    for (const std::string& h : hosts) {
      if (on_host[h] <= r.local_rank) continue;  // no rank with this local_rank there
      if (h == r.host) r.cross_rank = r.cross_size;
      ++r.cross_size;
    }
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
