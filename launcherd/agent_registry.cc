#include "launcherd/agent_registry.h"

#include <algorithm>

#include "base/clock.h"
#include "base/logging.h"
#include "control/log_escape.h"
#include "control/token.h"

namespace hvd::launcherd {
namespace {

// LOST agents are kept for `hvdrun agents` and /v1/agents, but agents that re-register under new
// ids would otherwise grow the table forever.
constexpr size_t kMaxLostAgents = 256;

}  // namespace

std::string AgentRegistry::Register(AgentInfo info, std::shared_ptr<AgentLink> link) {
  std::shared_ptr<AgentLink> replaced;
  std::string id;
  {
    base::MutexLock lock(&mu_);
    replaced = RegisterLocked(std::move(info), std::move(link), &id);
  }
  // Outside the lock: closing cancels the old stream, whose handler calls back in.
  if (replaced) replaced->Close();
  return id;
}

Status AgentRegistry::RegisterUnique(AgentInfo info, std::shared_ptr<AgentLink> link,
                                     std::string* id) {
  std::shared_ptr<AgentLink> replaced;
  {
    base::MutexLock lock(&mu_);
    for (const auto& [other_id, r] : agents_) {
      if (other_id == info.id || r.link == nullptr || r.lost || r.info.host != info.host) continue;
      return AlreadyExists(
          "another agent (" + other_id + ", advertising " + r.info.advertise_addr +
          ") is connected as host '" + info.host +
          "'; every agent needs its own host name, because ranks with the same name are "
          "taken to share a machine. Start this agent with --host NAME (a name unique in the "
          "cluster, e.g. the pod's or container's name), or stop the other one");
    }
    replaced = RegisterLocked(std::move(info), std::move(link), id);
    // The host's earlier agents that are gone for good (LOST, STOPPED) are this one's past: an
    // agent without --state-dir comes back under a new id, and `hvdrun status` counted each
    // restart as another agent ("3 ready of 6").
    const std::string& host = agents_[*id].info.host;
    for (auto it = agents_.begin(); it != agents_.end();) {
      const bool past = it->first != *id && it->second.lost && it->second.info.host == host;
      it = past ? agents_.erase(it) : std::next(it);
    }
  }
  if (replaced) replaced->Close();
  return Status::OK();
}

std::shared_ptr<AgentLink> AgentRegistry::RegisterLocked(AgentInfo info,
                                                         std::shared_ptr<AgentLink> link,
                                                         std::string* id_out) {
  std::string id = info.id;
  if (id.empty()) {
    do {
      id = (info.host.empty() ? std::string("agent") : info.host) + "-" + control::RandomHex(3);
    } while (agents_.count(id));
  }
  Record& r = agents_[id];
  const bool known = r.order != 0;
  std::shared_ptr<AgentLink> replaced = std::move(r.link);
  if (!known) r.order = ++next_order_;
  r.info = std::move(info);
  r.info.id = id;
  r.info.state = "READY";
  r.info.lost_reason.clear();  // the launcher's to say, not the agent's
  r.info.last_heartbeat_ms = base::WallMs();
  r.link = std::move(link);
  r.last_seen = Clock::now();
  r.restored = false;
  r.lost = false;
  r.stop_reason.clear();
  HVD_LOG(INFO) << "agent " << id << " on " << control::LogEscape(r.info.host) << " registered ("
                << r.info.slots << " slots" << (known ? ", reconnected" : "") << ")";
  *id_out = id;
  return replaced;
}

void AgentRegistry::Expect(const std::vector<AgentInfo>& agents) {
  base::MutexLock lock(&mu_);
  for (const AgentInfo& a : agents) {
    Record& r = agents_[a.id];
    if (r.order != 0) continue;
    r.order = ++next_order_;
    r.info = a;
    r.info.state = "DISCONNECTED";
    r.last_seen = Clock::now() + lease_;
    r.restored = true;
  }
}

void AgentRegistry::Touch(const std::string& id, const AgentLink* link) {
  base::MutexLock lock(&mu_);
  auto it = agents_.find(id);
  if (it == agents_.end() || it->second.link.get() != link) return;
  it->second.last_seen = Clock::now();
  it->second.info.last_heartbeat_ms = base::WallMs();
}

bool AgentRegistry::Disconnected(const std::string& id, const AgentLink* link, AgentInfo* stopped) {
  base::MutexLock lock(&mu_);
  auto it = agents_.find(id);
  if (it == agents_.end() || it->second.link.get() != link) return false;
  Record& r = it->second;
  r.link.reset();
  r.dropped_at = Clock::now();
  if (!r.stop_reason.empty()) {
    // Said goodbye: gone on purpose, not to wait out a lease (lost: the sweep skips it).
    r.lost = true;
    r.info.state = "STOPPED";
    r.info.lost_reason = std::move(r.stop_reason);
    r.stop_reason.clear();
    HVD_LOG(INFO) << "agent " << id << " on " << control::LogEscape(r.info.host)
                  << " stopped: " << r.info.lost_reason;
    if (stopped != nullptr) *stopped = r.info;
    return true;
  }
  if (!r.lost) r.info.state = "DISCONNECTED";
  HVD_LOG(INFO) << "agent " << id << " disconnected; LOST unless it reconnects within "
                << lease_.count() << " ms";
  return false;
}

void AgentRegistry::Stopping(const std::string& id, const AgentLink* link,
                             const std::string& reason) {
  base::MutexLock lock(&mu_);
  auto it = agents_.find(id);
  if (it == agents_.end() || it->second.link.get() != link) return;
  it->second.stop_reason =
      reason.empty() ? "the agent was stopped" : control::LogEscape(reason, 256);
}

std::string AgentRegistry::LossReason(const Record& r, Clock::time_point now) const {
  if (r.restored) {  // Expect gave it one more lease than usual
    return "it did not reconnect within " + base::SecondsText(2 * lease_) +
           " of the launcher's restart (two leases of " + base::SecondsText(lease_) +
           ", the launcher's --lease-ms)";
  }
  const std::string lease = "past the lease of " + base::SecondsText(lease_) + " (--lease-ms)";
  const std::string silent =
      base::SecondsText(std::chrono::duration_cast<std::chrono::milliseconds>(now - r.last_seen));
  if (r.link != nullptr) {
    // Nothing closed the stream. A host that lost power, panicked or was cut off sends no FIN
    // or RST either, so this is the usual text for those, not only for a hung agent.
    return "it sent nothing for " + silent + ", " + lease + ", while its connection to the " +
           "launcher stayed open: its host crashed, lost power or was cut off from the " +
           "network without closing the connection, or the agent hung";
  }
  const std::string closed =
      base::SecondsText(std::chrono::duration_cast<std::chrono::milliseconds>(now - r.dropped_at));
  return "its connection to the launcher closed, stayed closed for " + closed +
         ", and it sent nothing for " + silent + ", " + lease +
         ": the agent process ended (exited, killed) or its " +
         "host reset the connection (a reboot), and it did not reconnect";
}

std::vector<AgentInfo> AgentRegistry::ExpireLeases(Clock::time_point now) {
  std::vector<AgentInfo> lost;
  std::vector<std::shared_ptr<AgentLink>> to_close;
  {
    base::MutexLock lock(&mu_);
    for (auto& [id, r] : agents_) {
      if (r.lost || now - r.last_seen <= lease_) continue;
      r.lost = true;
      r.info.state = "LOST";
      r.info.lost_reason = LossReason(r, now);
      // A stream that is open but silent is as good as gone: close it so a live agent reconnects
      // and registers afresh.
      if (r.link) to_close.push_back(std::move(r.link));
      lost.push_back(r.info);
      HVD_LOG(WARNING) << "agent " << id << " on " << control::LogEscape(r.info.host)
                       << " lost: " << r.info.lost_reason;
    }
    size_t n_lost = 0;
    for (const auto& [id, r] : agents_) n_lost += r.lost;
    while (n_lost > kMaxLostAgents) {
      auto oldest = agents_.end();
      for (auto it = agents_.begin(); it != agents_.end(); ++it) {
        if (it->second.lost && (oldest == agents_.end() || it->second.order < oldest->second.order))
          oldest = it;
      }
      agents_.erase(oldest);
      --n_lost;
    }
  }
  for (auto& link : to_close) link->Close();
  return lost;
}

std::vector<AgentInfo> AgentRegistry::List() const {
  std::vector<std::pair<int64_t, AgentInfo>> sorted;
  {
    base::MutexLock lock(&mu_);
    for (const auto& [id, r] : agents_) sorted.emplace_back(r.order, r.info);
  }
  std::sort(sorted.begin(), sorted.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<AgentInfo> out;
  for (auto& [order, info] : sorted) out.push_back(std::move(info));
  return out;
}

std::vector<control::AgentSlots> AgentRegistry::Schedulable() const {
  std::vector<control::AgentSlots> out;
  base::MutexLock lock(&mu_);
  for (const auto& [id, r] : agents_) {
    if (r.lost || !r.link || !r.stop_reason.empty()) continue;  // gone, or said goodbye
    control::AgentSlots a;
    a.id = id;
    a.host = r.info.host;
    a.advertise_addr = r.info.advertise_addr;
    a.slots = r.info.slots;
    a.order = r.order;
    out.push_back(std::move(a));
  }
  return out;
}

std::shared_ptr<AgentLink> AgentRegistry::Link(const std::string& id) const {
  base::MutexLock lock(&mu_);
  auto it = agents_.find(id);
  return it == agents_.end() ? nullptr : it->second.link;
}

std::map<std::string, double> AgentRegistry::HeartbeatAges(Clock::time_point now) const {
  std::map<std::string, double> out;
  base::MutexLock lock(&mu_);
  for (const auto& [id, r] : agents_) {
    // One known only from a restored job (Expect) has sent nothing to this launcher: no age
    // (its lease counts from the restart, which would read as a recent heartbeat).
    if (r.info.last_heartbeat_ms == 0) continue;
    out[id] = std::chrono::duration<double>(now - r.last_seen).count();
  }
  return out;
}

void AgentRegistry::CloseAll() {
  std::vector<std::shared_ptr<AgentLink>> links;
  {
    base::MutexLock lock(&mu_);
    for (auto& [id, r] : agents_) {
      if (r.link) links.push_back(r.link);
    }
  }
  for (auto& link : links) link->Close();
}

}  // namespace hvd::launcherd
