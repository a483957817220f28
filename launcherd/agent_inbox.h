// Between the agents' streams and JobManager: each stream's reader appends what it read to the
// stream's queue and goes back to reading; one applier thread hands each stream's queue to
// JobManager in one batch (JobManager::OnAgentReports, one acquisition of its lock per batch).
//
// Why: a reader that applied each message itself waited for JobManager's lock whenever the
// launcher was busy (a large job starting, hundreds of rank events), stopped reading, and so
// stopped renewing its agent's lease: healthy agents were declared LOST and their jobs failed.
// Now a reader waits only for its own queue's lock, and the lease is renewed on each message's
// arrival (AgentGatewayService), never on its application.
//
// Order: a stream's entries are applied in the order they were read, by one thread; streams take
// turns (a stream with entries waits in a FIFO of ready streams). Consecutive heartbeats still
// queued collapse into the newest (it says all the older ones did). A stream's queue is bounded:
// a reader that fills it waits (with a deadline, so that it can renew the lease meanwhile).
//
// Rank events (issue 22): after a batch the applier acknowledges, on the agent's current stream,
// the highest RankEvent.seq applied for that agent (one RankEventAck per batch), and it drops an
// event whose seq it applied before: an agent sends what was not acknowledged again on its next
// stream, and the ack may have been lost with the old one. Seqs are per agent process
// (AgentInfo.incarnation); seq 0 (an older agent) is applied as it comes and never acked.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <variant>

#include "base/mutex.h"
#include "base/thread_annotations.h"
#include "launcherd/agent_registry.h"
#include "launcherd/agent_report.h"
#include "launcherd/probe_types.h"

namespace hvd::launcherd {

class JobManager;
class NetworkCheck;

// The stream registered (JobManager::OnAgentRegistered, then placement) or ended
// (JobManager::OnAgentDisconnected); queued so that they keep their place among the reports.
struct StreamRegistered {};
struct StreamEnded {
  // The agent had said goodbye on this stream: STOPPED, as the registry made it when the stream
  // ended (carried here: a successor may have replaced the record by the time this is applied).
  std::optional<AgentInfo> stopped;
};
using InboxEntry = std::variant<AgentReport, ProbeReport, StreamRegistered, StreamEnded>;

class AgentInbox {
 public:
  // At most this many entries wait per stream before its reader waits for the applier.
  static constexpr size_t kMaxQueued = 4096;

  class Stream;

  // `agents` and `jobs` must outlive the inbox. Starts the applier thread.
  AgentInbox(const AgentRegistry* agents, JobManager* jobs);
  // Applies what is still queued, then ends the applier.
  ~AgentInbox();
  AgentInbox(const AgentInbox&) = delete;
  AgentInbox& operator=(const AgentInbox&) = delete;

  // Where probe reports go (null, the default: dropped); must outlive the inbox.
  void SetNetworkCheck(NetworkCheck* network) { network_.store(network); }

  // A queue for one stream of agent `agent_id`, whose commands go through `link`; `incarnation`:
  // the agent process's AgentInfo.incarnation (0: an agent that does not number its events).
  std::shared_ptr<Stream> Open(const std::string& agent_id, std::shared_ptr<AgentLink> link,
                               uint64_t incarnation = 0);
  // Appends `entry` to the stream's queue (it is moved from only on success). False when the
  // queue stayed full until `deadline`. Never waits for JobManager.
  bool Post(const std::shared_ptr<Stream>& stream, InboxEntry& entry,
            std::chrono::steady_clock::time_point deadline);
  // For readers that must not wait (gRPC callback reactions share a few threads among every
  // agent): when `stream`'s queue is full, `resume` runs once the applier has taken the queue (on
  // the applier's thread, before it applies it, with no lock held) and the call returns true;
  // when there is room already, it returns false and `resume` is dropped.
  bool WhenRoom(const std::shared_ptr<Stream>& stream, std::function<void()> resume);
  // Whether agent `agent_id`'s current stream has an entry that arrived at or before `before` and
  // is not applied yet (queued, or in the batch being applied). JobManager asks it, under its
  // lock, before failing a MASTER_PORT deadline (AgentBacklog in job.h); never waits for it.
  bool Backlog(const std::string& agent_id, std::chrono::steady_clock::time_point before)
      HVD_EXCLUDES(mu_);
  // Blocks until everything posted so far has been applied, or `timeout` passed (tests, and the
  // launcher's drain before it stops). True when it was.
  bool WaitApplied(std::chrono::milliseconds timeout);

 private:
  void ApplierLoop();
  void Apply(Stream& stream, std::deque<InboxEntry> entries);

  // The rank events applied from one agent process: the applier thread's alone (no lock). One
  // small entry per agent id ever seen (an agent without --state-dir gets a new id per run).
  struct AppliedSeqs {
    uint64_t incarnation = 0;
    uint64_t through = 0;  // every seq <= this was applied
  };
  std::map<std::string, AppliedSeqs> applied_seqs_;

  const AgentRegistry* const agents_;
  JobManager* const jobs_;
  std::atomic<NetworkCheck*> network_{nullptr};

  base::Mutex mu_;
  base::CondVar work_cv_;     // ready_ grew or stop_ was set
  base::CondVar applied_cv_;  // applied_ grew
  std::deque<std::shared_ptr<Stream>> ready_ HVD_GUARDED_BY(mu_);
  // Each agent's newest stream, for Backlog() and RankEventAcks.
  std::map<std::string, std::weak_ptr<Stream>> current_ HVD_GUARDED_BY(mu_);
  size_t prune_at_ HVD_GUARDED_BY(mu_) = 64;
  int64_t posted_ HVD_GUARDED_BY(mu_) = 0;
  int64_t applied_ HVD_GUARDED_BY(mu_) = 0;
  bool stop_ HVD_GUARDED_BY(mu_) = false;
  std::thread applier_;
};

}  // namespace hvd::launcherd
