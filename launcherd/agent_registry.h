// The agents the launcher knows: who they are, how many slots they have, when they last spoke,
// and the link that carries commands down their stream. Thread-safe; knows nothing of jobs (the
// launcher tells JobManager when an agent is lost).
//
// Liveness: any message from an agent renews its lease. When its stream ends the agent stays
// (DISCONNECTED, not schedulable) so that a quick reconnect under the same id keeps its ranks;
// silent for longer than the lease it becomes LOST and ExpireLeases() reports it once.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/mutex.h"
#include "base/thread_annotations.h"
#include "launcherd/job_types.h"
#include "launcherd/master_port.h"
#include "launcherd/probe_types.h"

namespace hvd::launcherd {

// Carries commands to one connected agent. Implemented by the AgentGateway service over the
// agent's stream; Send* must not block (they are called with JobManager's lock held).
class AgentLink {
 public:
  virtual ~AgentLink() = default;
  // False when the stream is gone and the command was dropped.
  virtual bool SendStartRank(const StartRankCommand& command) = 0;
  virtual bool SendStopJob(const StopJobCommand& command) = 0;
  // A step of a network probe (network_check.h). Links that cannot carry one refuse it.
  virtual bool SendProbe(const ProbeCommand& command) { return false; }
  // Asks the agent for MASTER_PORT (master_port.h). Links that cannot carry it refuse it.
  virtual bool SendMasterPort(const MasterPortCommand& command) { return false; }
  // Tells the agent that its rank events up to `through_seq` were applied (RankEventAck), so it
  // stops keeping them for a resend. Links that cannot carry it refuse it.
  virtual bool SendRankEventAck(uint64_t through_seq) { return false; }
  // Asks the agent for ranks' stacks (hvd.v1.StackDump). Links that cannot carry it refuse it.
  virtual bool SendStackDump(const StackDumpCommand& command) { return false; }
  // Ends the stream (another connection took over the agent's id, or the launcher stops).
  virtual void Close() = 0;
};

class AgentRegistry {
 public:
  using Clock = std::chrono::steady_clock;

  explicit AgentRegistry(std::chrono::milliseconds lease) : lease_(lease) {}
  AgentRegistry(const AgentRegistry&) = delete;
  AgentRegistry& operator=(const AgentRegistry&) = delete;

  // Registers an agent that connected through `link`, under info.id when the agent sent one (a
  // reconnect keeps its id and its ranks) or a new id. A previous link under the same id is
  // closed. Returns the id.
  std::string Register(AgentInfo info, std::shared_ptr<AgentLink> link);
  // Register for agents that connect over the network (AgentGateway): refuses, with
  // AlreadyExists and a message naming `hvd-agent --host`, an agent whose host name a different,
  // connected agent already carries. Ranks are grouped by host name (HVD_HOSTNAME), so two
  // agents in different network namespaces or containers that both defaulted to the same
  // gethostname() once made their ranks dial each other's shared memory in vain. An agent of
  // that name that is DISCONNECTED or LOST does not count: a restarted agent without
  // --state-dir comes back under a new id and must not wait out its old lease.
  Status RegisterUnique(AgentInfo info, std::shared_ptr<AgentLink> link, std::string* id);
  // Agents a restarted launcher expects back (their ranks were running): known, DISCONNECTED, and
  // LOST if they do not register within two leases from now (one more than usual: they noticed
  // the outage late and back off between attempts). Known ids are left as they are.
  void Expect(const std::vector<AgentInfo>& agents);
  // Any message from the agent over `link`: renews its lease. Ignored for a replaced link.
  void Touch(const std::string& id, const AgentLink* link);
  // The stream of `link` ended. Ignored when a newer link has taken over. True when the agent
  // had said goodbye on it (Stopping): it is STOPPED now, its record copied to `stopped`.
  bool Disconnected(const std::string& id, const AgentLink* link, AgentInfo* stopped = nullptr);
  // The agent said goodbye on `link` (it is stopped on purpose): when that stream ends it is
  // STOPPED, with `reason`, instead of DISCONNECTED, and never LOST. Ignored for a replaced link.
  void Stopping(const std::string& id, const AgentLink* link, const std::string& reason);
  // Marks agents silent for longer than the lease as LOST and returns them (each once), with
  // lost_reason saying whether its connection had closed or stayed open while it was silent.
  std::vector<AgentInfo> ExpireLeases(Clock::time_point now);

  // Every agent (READY, DISCONNECTED, LOST and STOPPED), in registration order; slots_in_use
  // left 0.
  std::vector<AgentInfo> List() const;
  // READY agents for placement; busy slots left empty for the caller to fill.
  std::vector<control::AgentSlots> Schedulable() const;
  // The agent's link, or null when it is not connected.
  std::shared_ptr<AgentLink> Link(const std::string& id) const;
  // Seconds since each agent's last message (for /metrics); none for an agent known only from
  // a restored job (Expect) that has not registered since.
  std::map<std::string, double> HeartbeatAges(Clock::time_point now) const;

  // Closes every link (the launcher stops).
  void CloseAll();

 private:
  struct Record {
    AgentInfo info;
    std::shared_ptr<AgentLink> link;  // null while disconnected or lost
    int64_t order = 0;
    Clock::time_point last_seen;
    Clock::time_point dropped_at;  // when its last stream ended (Disconnected)
    bool restored = false;         // known from a restored job (Expect), not registered since
    bool lost = false;             // LOST, or STOPPED: gone for good unless it registers again
    std::string stop_reason;       // its goodbye's, on the current link (Stopping)
  };

  // Why an agent whose lease just ran out is lost, from what its record saw. REQUIRES: mu_ held.
  std::string LossReason(const Record& r, Clock::time_point now) const HVD_REQUIRES(mu_);

  // Register's body. REQUIRES: mu_ held; returns the link it replaced (to close outside the lock).
  std::shared_ptr<AgentLink> RegisterLocked(AgentInfo info, std::shared_ptr<AgentLink> link,
                                            std::string* id) HVD_REQUIRES(mu_);

  const std::chrono::milliseconds lease_;
  mutable base::Mutex mu_;
  std::map<std::string, Record> agents_ HVD_GUARDED_BY(mu_);
  int64_t next_order_ HVD_GUARDED_BY(mu_) = 0;
};

}  // namespace hvd::launcherd
