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
// Reactions never wait: they run on a few threads gRPC shares among every agent, and one that
// waited for JobManager would stop every other agent's lease renewal. When the stream's inbox
// queue is full the message is parked and no read is started (HTTP/2 flow control then holds
// back that agent alone); the inbox's applier resumes the stream once it has taken the queue, and
// the launcher's sweeper renews the leases of parked agents meanwhile (TouchParked).
//
// Lifetime: gRPC deletes nothing; the reactor deletes itself in OnDone, which comes only after
// Finish and after every read and write it started has completed. Finish is called once, by
// whoever ends the stream first (the read side ending, the registry closing the link, a refused
// registration), and never while a write the link started is in flight or a message is parked:
// then OnWriteDone, or the resume, calls it. So nothing reaches a deleted reactor. Closing a
// stream whose write is stuck (an agent that stopped reading) cancels the call.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <deque>
#include <memory>
#include <optional>
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
  // A stream parked a message (its inbox queue is full) or resumed: while parked, the agent's
  // lease is renewed for it (its messages are waiting in the socket, not missing).
  virtual void Park(StreamLink* link, const std::string& agent_id) = 0;
  virtual void Unpark(StreamLink* link) = 0;
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
  bool SendStackDump(const StackDumpCommand& command) override;
  // Ends the stream (another connection took over the agent's id, or the launcher stops).
  void Close() override {
    End(grpc::Status(grpc::StatusCode::CANCELLED, "closed by the launcher"));
  }

  // Queues the RegisterAck ahead of anything queued before it and starts writing.
  void Ready(v1::LauncherMessage ack);
  // Ends the stream with `status`: Finish now, or once the write in flight is done (cancelling
  // the call, so that a write to an agent that stopped reading ends) or the parked message is
  // queued. Idempotent.
  void End(const grpc::Status& status);
  // Whether nothing is left to write (or nothing can be written any more).
  bool Idle();

  // The reactor's side. REQUIRES: called from its reactions only.
  void OnWriteDone(bool ok);
  // The reactor is being deleted: every later Send* is refused.
  void Detach();
  // Whether the stream is ending (reads must not be started any more).
  bool Finishing();
  // A message is parked: Finish waits for Release.
  void Hold();
  // Ends the hold, calling Finish if the stream ended meanwhile (the reactor may then be deleted:
  // the caller touches nothing of it afterwards).
  void Release();

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
  int held_ HVD_GUARDED_BY(mu_) = 0;  // parked messages not yet queued
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
  friend class StreamLink;  // StartWrite, Finish and Cancel

  // What follows once an entry is queued: reading on, or the end of the stream.
  enum class Then { kRead, kEnd };

  // REQUIRES (all but Resume): on a read reaction, or on the applier's thread in Resume; never
  // both (a parked stream has no read in flight).
  void Register();
  // What JobManager hears of `m`; nothing for a message this launcher does not know.
  std::optional<InboxEntry> Translate(v1::AgentMessage& m);
  // Queues `entry` for JobManager without waiting, then does `then`; parks it when the stream's
  // queue is full (Resume does `then` later).
  void Queue(InboxEntry entry, Then then);
  void Continue(Then then);
  // The read side is over (the agent left, or the stream is ending): the registry and JobManager
  // hear it, then Finish. Once.
  void ReadSideEnded();
  void Resume();  // the applier took the full queue
  void Refuse(const grpc::Status& status);
  void Cancel() { context_->TryCancel(); }

  StreamHost* const host_;
  grpc::CallbackServerContext* const context_;
  const std::shared_ptr<StreamLink> link_;
  v1::AgentMessage in_;  // the read in flight
  std::string id_;       // once registered
  std::shared_ptr<AgentInbox::Stream> queue_;
  bool registered_ = false, linked_ = false, read_side_ended_ = false;
  InboxEntry parked_;  // while the queue is full
  Then parked_then_ = Then::kRead;
};

}  // namespace hvd::launcherd
