// One simulated hvd-agent of the swarm: the real AgentGateway.Connect protocol (AgentInfo first,
// RegisterAck, heartbeats with the running jobs, RankEvents, MasterPortReports) over a channel
// and TCP connection of its own, through gRPC's callback API, so that a thousand agents need no
// thread each. Ranks are not processes: a StartRank is answered RUNNING (a pid no process can
// have) and, after the time its argv asks for or when released, EXITED with its exit code.
//
// What it copies from hvd-agent (agent/agent.cc, agent/launcher_client.cc), so that the launcher
// sees what a real agent would send: the channel arguments, the 10 s registration deadline, a
// fresh channel after a failed attempt, reconnect backoff 100 ms doubling to 2 s with jitter, the
// previous agent id on re-registration, rank events kept for the next stream when a stream breaks,
// and the ranks ended (KILLED) once the launcher has been unreachable for longer than the lease.
//
// A simulated rank's argv (the job's program and arguments, as `hvdrun submit` sends them):
//   --run-ms=N     exit N ms after starting (default 0: at once)
//   --hold         run until Swarm::Release (the driver's "release" command) instead
//   --exit-code=C  the exit code to report (default 0)
//   --start-ms=N   report RUNNING N ms after the StartRank (default 0: at once)
// Anything else in argv is ignored.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "control/tls.h"
#include "hvd/v1/agent.grpc.pb.h"
#include "timer_queue.h"

namespace hvd::bench {

struct SwarmConfig {
  std::string launcher;  // host:port of the launcher's gRPC endpoint
  std::string token;
  control::TlsConfig tls;
  int slots = 8;
  int64_t heartbeat_ms = 0;  // 0: the interval the launcher's RegisterAck says
  std::chrono::milliseconds register_timeout{10000};  // hvd-agent's kRegisterTimeout
  std::string host_prefix = "sim-";
};

// Counters of the whole swarm; read by Swarm::StatsJson while agents update them.
struct SwarmStats {
  std::atomic<int64_t> attempts{0};         // Connect calls opened
  std::atomic<int64_t> acks{0};             // registrations acknowledged
  std::atomic<int64_t> failed_attempts{0};  // Connect calls that ended before their RegisterAck
  std::atomic<int64_t> stream_breaks{0};    // registered streams that ended (not at shutdown)
  std::atomic<int64_t> heartbeats{0};
  std::atomic<int64_t> rank_events{0};
  std::atomic<int64_t> event_acks{0};  // RankEventAck messages (hvd-agent forgets what they cover)
  std::atomic<int64_t> starts{0};  // StartRank commands
  std::atomic<int64_t> stops{0};   // StopJob commands
  std::atomic<int64_t> master_ports{0};
  std::atomic<int64_t> unexpected{0};   // probes and unknown commands (not simulated)
  std::atomic<int64_t> lease_kills{0};  // ranks ended because the launcher stayed unreachable
  // The longest write queue of any stream: deep queues mean the launcher was not reading (HTTP/2
  // flow control held the agent back), short ones that a delay was not the swarm's writing.
  std::atomic<int64_t> max_write_queue{0};
  std::atomic<int> connected{0};               // agents with a registered stream now
  std::atomic<int> ever_registered{0};         // agents registered at least once
  std::atomic<int64_t> all_registered_ms{-1};  // since the swarm started; -1: not yet

  // Why attempts failed and streams broke, by message (at most 20 distinct ones kept).
  void AddError(const std::string& what);
  std::map<std::string, int64_t> Errors() const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, int64_t> errors_;  // guarded by mu_
};

// What every agent of one swarm shares.
struct SwarmShared {
  SwarmConfig config;
  int agents = 0;
  TimerQueue timer;
  SwarmStats stats;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  std::atomic<bool> stopping{false};
  std::atomic<int64_t> next_pid{5'000'000};  // above Linux's largest pid_max (2^22)

  // Streams whose OnDone has not run: the agents must outlive them.
  std::mutex streams_mu;
  std::condition_variable streams_cv;
  int live_streams = 0;  // guarded by streams_mu
};

class AgentStream;

class SimAgent {
 public:
  SimAgent(SwarmShared* swarm, int index);
  ~SimAgent();
  SimAgent(const SimAgent&) = delete;
  SimAgent& operator=(const SimAgent&) = delete;

  void Connect();  // opens a stream (the first, or the next after a backoff)
  // Held ranks of `job` ("": of every job) exit with their exit code; returns how many.
  int Release(const std::string& job);
  void Cancel();  // ends the current stream (shutdown); no reconnect once swarm->stopping
  int live_ranks() const;
  int held_ranks() const;

  // From the stream's reactor (gRPC's threads). `s` may be a stream this agent gave up on.
  void OnAck(AgentStream* s, const v1::RegisterAck& ack);
  void OnCommand(AgentStream* s, const v1::LauncherMessage& msg);
  void OnStreamDone(AgentStream* s, const grpc::Status& status, bool acked);

 private:
  using Clock = std::chrono::steady_clock;
  using Key = std::tuple<std::string, int, int>;  // job, attempt, rank
  struct Rank {
    v1::RankPlacement placement;
    bool running = false;  // RUNNING reported
    bool hold = false;
    int64_t run_ms = 0;
    int start_ms = 0;
    int exit_code = 0;
    int pid = 0;
  };
  // Streams to kick once mu_ is released: gRPC may run reactions inline in StartWrite, and
  // those take the stream's lock and this agent's.
  using Kicks = std::vector<std::shared_ptr<AgentStream>>;

  v1::AgentInfo BuildInfoLocked() const;
  void SendLocked(v1::AgentMessage m, bool keep_if_offline, Kicks* kicks);
  v1::AgentMessage EventLocked(const Key& key, const Rank& r, v1::RankState state) const;
  void RankRunning(const Key& key);
  void RankExited(const Key& key, int pid);
  void Heartbeat(uint64_t gen);
  void RegisterDeadline(uint64_t gen);
  void EndRanksIfLeaseExpiredLocked(Clock::time_point now);
  void NumberLocked(v1::AgentMessage* m);
  std::shared_ptr<grpc::Channel> NewChannel() const;
  static void Kick(const Kicks& kicks);

  SwarmShared* const swarm_;
  const int index_;
  const std::string host_;

  mutable std::mutex mu_;
  std::shared_ptr<grpc::Channel> channel_;  // guarded by mu_
  std::shared_ptr<AgentStream> stream_;     // guarded by mu_; the current stream, if any
  uint64_t gen_ = 0;                        // guarded by mu_; counts streams (timers check it)
  bool acked_ = false;                      // guarded by mu_; stream_ is registered
  bool registered_once_ = false;            // guarded by mu_
  std::string agent_id_;                    // guarded by mu_; the launcher's id for this agent
  std::chrono::milliseconds heartbeat_{1000}, lease_{5000};  // guarded by mu_
  std::chrono::milliseconds backoff_{100};                   // guarded by mu_
  Clock::time_point unreachable_since_;                      // guarded by mu_
  std::deque<v1::AgentMessage> pending_;  // guarded by mu_; rank events for the next stream
  std::map<Key, Rank> ranks_;             // guarded by mu_; started, not yet ended
  uint32_t jitter_;                       // guarded by mu_
  // Rank events are numbered as hvd-agent numbers them (RankEvent.seq, AgentInfo.incarnation), so
  // the launcher deduplicates and acknowledges them under load; the swarm never resends (a stream
  // that breaks loses what it carried, as an agent without acknowledgements would).
  const uint64_t incarnation_;
  uint64_t next_seq_ = 1;  // guarded by mu_
};

}  // namespace hvd::bench
