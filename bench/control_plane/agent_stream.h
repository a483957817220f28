// One AgentGateway.Connect call of a simulated agent, as a gRPC callback reactor: no thread of
// its own. The registration is written first; one read is always outstanding; writes are queued
// and written one at a time. Lifetime: shared, and the stream keeps itself alive until OnDone,
// so an agent (or the timer thread) may still hold it after gRPC is done with it.
#pragma once

#include <grpcpp/grpcpp.h>

#include <deque>
#include <memory>
#include <mutex>

#include "hvd/v1/agent.grpc.pb.h"

namespace hvd::bench {

class SimAgent;
struct SwarmShared;

class AgentStream final : public grpc::ClientBidiReactor<v1::AgentMessage, v1::LauncherMessage>,
                          public std::enable_shared_from_this<AgentStream> {
 public:
  AgentStream(SwarmShared* swarm, SimAgent* agent, std::shared_ptr<grpc::Channel> channel);
  ~AgentStream() override = default;

  // Opens the call with `registration` as its first message. Call once, without locks held
  // (gRPC may run reactions inline); the stream may be finished when it returns.
  void Start(const v1::AgentMessage& registration);

  // Queues `m`. True when the caller must call Kick() (no write was in flight), once it holds no
  // lock; false when a write in flight will pick it up or the stream is dead (dropped). Queueing
  // under the agent's lock and writing outside it keeps the agent's messages in order.
  bool Enqueue(v1::AgentMessage m);
  void Kick();
  // Ends the call (registration deadline, shutdown); OnDone follows. Any thread, no locks held.
  void Cancel();
  // The messages never written (a failed write's included): rank events the agent keeps for its
  // next stream. From SimAgent::OnStreamDone, under the agent's lock: nothing is queued after.
  std::deque<v1::AgentMessage> TakeUnsent();

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;

 private:
  SwarmShared* const swarm_;
  SimAgent* const agent_;
  std::unique_ptr<v1::AgentGateway::Stub> stub_;
  std::unique_ptr<grpc::ClientContext> context_;
  v1::LauncherMessage in_;  // the outstanding read's target (reactor callbacks only)
  bool acked_ = false;      // reactor callbacks only (reads are serialized, OnDone is last)
  std::shared_ptr<AgentStream> self_;  // set by Start, dropped by OnDone

  std::mutex mu_;
  std::deque<v1::AgentMessage> queue_;  // guarded by mu_; front: the write in flight
  bool writing_ = false;                // guarded by mu_
  bool alive_ = true;                   // guarded by mu_; false once a read or write failed
  // The hold (AddHold) keeps OnDone away while a Kick from another thread may still call
  // StartWrite; it goes when the stream is dead and no Kick is between its check and its write.
  int kicking_ = 0;             // guarded by mu_
  bool hold_released_ = false;  // guarded by mu_
  bool ReleaseHoldLocked();     // true: the caller must RemoveHold() once unlocked
};

}  // namespace hvd::bench
