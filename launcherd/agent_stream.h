// One agent's AgentGateway.Connect stream on gRPC's callback API: a reactor that gRPC's own small
// thread pool drives, so the launcher's threads do not grow with its agents (issue 22: the
// synchronous server held a reader and a writer thread per agent, 2,000 threads and a third of a
// core at 1,000 agents, mostly in thread hand-offs).
//
// Reading: the first message must be AgentInfo (validated, registered, answered with RegisterAck);
// then each message renews the agent's lease on arrival (AgentRegistry::Touch) and is queued for
// JobManager (agent_inbox.h), never applied here. Writing: JobManager's commands go through the
// stream's StreamLink (an AgentLink) into a queue; one write is in flight at a time, the next
// started from OnWriteDone. The link outlives the reactor (the registry holds it) and refuses
// commands once the stream is over.
//
// Lifetime: gRPC deletes nothing; the reactor deletes itself in OnDone, which comes only after
// Finish and after every read and write it started has completed. Finish is called once, by
// whoever ends the stream first (the read side ending, the registry closing the link, a refused
// registration), and never while a write the link started is in flight: then OnWriteDone calls
// it. So no StartWrite can reach a deleted reactor.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <deque>
#include <memory>
#include <string>

#include "base/mutex.h"
#include "base/thread_annotations.h"
#include "hvd/v1/agent.grpc.pb.h"
#include "launcherd/agent_inbox.h"
#include "launcherd/agent_registry.h"

namespace hvd::launcherd {

class AgentStream;
class StreamLink;

// What a stream needs from the service that accepted it (AgentGatewayService).
class StreamHost {
 public:
  virtual ~StreamHost() = default;
  virtual AgentRegistry* agents() = 0;
  virtual AgentInbox* inbox() = 0;
  virtual std::chrono::milliseconds heartbeat_interval() const = 0;
  virtual std::chrono::milliseconds lease() const = 0;
  // Adds a registered stream's link to those Drain() waits for; false once the service refuses
  // new streams (the launcher stops).
  virtual bool AddLink(StreamLink* link) = 0;
  virtual void RemoveLink(StreamLink* link) = 0;
};

// The commands side of one stream. Thread-safe; Send* never block.
class StreamLink final : public AgentLink {
 public:
  explicit StreamLink(AgentStream* stream) : stream_(stream) {}

  bool SendStartRank(const StartRankCommand& command) override;
  bool SendStopJob(const StopJobCommand& command) override;
  bool SendProbe(const ProbeCommand& command) override;
  bool SendMasterPort(const MasterPortCommand& command) override;
  bool SendRankEventAck(uint64_t through_seq) override;
  // Ends the stream (another connection took over the agent's id, or the launcher stops).
  void Close() override {
    End(grpc::Status(grpc::StatusCode::CANCELLED, "closed by the launcher"));
  }

  // Queues the RegisterAck ahead of anything queued before it and starts writing.
  void Ready(v1::LauncherMessage ack);
  // Ends the stream with `status`: Finish now, or once the write in flight is done. Idempotent.
  void End(const grpc::Status& status);
  // Whether nothing is left to write (or nothing can be written any more).
  bool Idle();

  // The reactor's side. REQUIRES: called from its reactions only.
  void OnWriteDone(bool ok);
  // The reactor is being deleted: every later Send* is refused.
  void Detach();
  // Whether Finish was called (reads must not be started after it).
  bool Finishing();

 private:
  bool Enqueue(v1::LauncherMessage m);
  // Under mu_: what to write next (null: nothing, or not now). Marks it in flight.
  const v1::LauncherMessage* NextLocked() HVD_REQUIRES(mu_);
  // Under mu_: whether the caller must call Finish now (it is wanted and no write is in flight).
  bool TakeFinishLocked(grpc::Status* status) HVD_REQUIRES(mu_);
  void Start(const v1::LauncherMessage* write, bool finish, const grpc::Status& status);

  base::Mutex mu_;
  AgentStream* stream_ HVD_GUARDED_BY(mu_);  // null once the reactor is gone
  // Pushes and pops at the ends keep references to the other elements valid: the front is the
  // message in flight (gRPC reads it until OnWriteDone).
  std::deque<v1::LauncherMessage> queue_ HVD_GUARDED_BY(mu_);
  bool ready_ HVD_GUARDED_BY(mu_) = false;    // the RegisterAck is queued
  bool writing_ HVD_GUARDED_BY(mu_) = false;  // queue_.front() is in flight
  bool write_failed_ HVD_GUARDED_BY(mu_) = false;
  bool finish_wanted_ HVD_GUARDED_BY(mu_) = false;
  bool finish_called_ HVD_GUARDED_BY(mu_) = false;
  grpc::Status finish_status_ HVD_GUARDED_BY(mu_);
};

class AgentStream final : public grpc::ServerBidiReactor<v1::AgentMessage, v1::LauncherMessage> {
 public:
  AgentStream(StreamHost* host, grpc::CallbackServerContext* context);

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override { link_->OnWriteDone(ok); }
  void OnDone() override;

 private:
  friend class StreamLink;  // StartWrite and Finish

  void Register();
  void Handle(v1::AgentMessage& m);
  // Queues for JobManager; waits (renewing the lease) only while the stream's queue is full.
  void Post(InboxEntry entry);
  void Refuse(const grpc::Status& status);

  StreamHost* const host_;
  grpc::CallbackServerContext* const context_;
  const std::shared_ptr<StreamLink> link_;
  v1::AgentMessage in_;  // the read in flight
  std::string id_;       // once registered
  std::shared_ptr<AgentInbox::Stream> queue_;
  bool registered_ = false, linked_ = false;
};

}  // namespace hvd::launcherd
