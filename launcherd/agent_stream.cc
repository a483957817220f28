#include "launcherd/agent_stream.h"

#include "base/logging.h"
#include "control/grpc_util.h"
#include "control/log_escape.h"
#include "control/spec_limits.h"
#include "control/tls_grpc.h"
#include "launcherd/network_convert.h"
#include "launcherd/proto_convert.h"

namespace hvd::launcherd {

// --- StreamLink ---

bool StreamLink::SendStartRank(const StartRankCommand& command) {
  v1::LauncherMessage m;
  ToProto(command, m.mutable_start());
  return Enqueue(std::move(m));
}

bool StreamLink::SendStopJob(const StopJobCommand& command) {
  v1::LauncherMessage m;
  if (command.ranks.empty()) {
    ToProto(command, m.mutable_stop());
  } else {
    ToProto(command, m.mutable_stop_ranks());
  }
  return Enqueue(std::move(m));
}

bool StreamLink::SendProbe(const ProbeCommand& command) {
  v1::LauncherMessage m;
  ToProto(command, m.mutable_probe());
  return Enqueue(std::move(m));
}

bool StreamLink::SendMasterPort(const MasterPortCommand& command) {
  v1::LauncherMessage m;
  m.mutable_master_port()->set_request_id(command.request_id);
  m.mutable_master_port()->set_job_id(command.job_id);
  return Enqueue(std::move(m));
}

bool StreamLink::SendStackDump(const StackDumpCommand& command) {
  v1::LauncherMessage m;
  ToProto(command, m.mutable_stack_dump());
  return Enqueue(std::move(m));
}

bool StreamLink::SendRankEventAck(uint64_t through_seq) {
  v1::LauncherMessage m;
  m.mutable_event_ack()->set_through_seq(through_seq);
  return Enqueue(std::move(m));
}

void StreamLink::Ready(v1::LauncherMessage ack) {
  const v1::LauncherMessage* write = nullptr;
  {
    base::MutexLock lock(&mu_);
    if (stream_ == nullptr || finish_wanted_) return;
    // Commands JobManager queued before the ack wait behind it; none is in flight yet.
    queue_.push_front(std::move(ack));
    ready_ = true;
    write = NextLocked();
  }
  Start(write, false, grpc::Status::OK);
}

bool StreamLink::Enqueue(v1::LauncherMessage m) {
  const v1::LauncherMessage* write = nullptr;
  {
    base::MutexLock lock(&mu_);
    if (stream_ == nullptr || finish_wanted_ || write_failed_) return false;
    queue_.push_back(std::move(m));
    write = NextLocked();
  }
  Start(write, false, grpc::Status::OK);
  return true;
}

const v1::LauncherMessage* StreamLink::NextLocked() {
  if (!ready_ || writing_ || queue_.empty() || finish_wanted_ || write_failed_ ||
      stream_ == nullptr) {
    return nullptr;
  }
  writing_ = true;
  return &queue_.front();
}

bool StreamLink::TakeFinishLocked(grpc::Status* status) {
  if (!finish_wanted_ || finish_called_ || writing_ || held_ > 0 || stream_ == nullptr) {
    return false;
  }
  finish_called_ = true;
  *status = finish_status_;
  return true;
}

// Outside mu_: gRPC may run a reaction on this thread, and reactions take mu_. The reactor is
// alive: a write in flight or a Finish not yet called keeps OnDone away (agent_stream.h).
void StreamLink::Start(const v1::LauncherMessage* write, bool finish, const grpc::Status& status) {
  AgentStream* stream;
  {
    base::MutexLock lock(&mu_);
    stream = stream_;
  }
  if (stream == nullptr) return;
  if (write != nullptr) stream->StartWrite(write);
  if (finish) stream->Finish(status);
}

void StreamLink::End(const grpc::Status& status) {
  grpc::Status finish;
  bool now = false;
  {
    base::MutexLock lock(&mu_);
    if (finish_wanted_) return;
    finish_wanted_ = true;
    finish_status_ = status;
    now = TakeFinishLocked(&finish);
    // A write to an agent that stopped reading ends only when the call is cancelled; the write
    // in flight keeps the reactor alive (OnWriteDone needs mu_), and TryCancel runs no reaction
    // on this thread.
    if (writing_ && stream_ != nullptr) stream_->Cancel();
  }
  if (now) Start(nullptr, true, finish);
}

void StreamLink::Hold() {
  base::MutexLock lock(&mu_);
  ++held_;
}

void StreamLink::Release() {
  grpc::Status finish;
  bool now = false;
  {
    base::MutexLock lock(&mu_);
    --held_;
    now = TakeFinishLocked(&finish);
  }
  if (now) Start(nullptr, true, finish);
}

void StreamLink::OnWriteDone(bool ok) {
  const v1::LauncherMessage* write = nullptr;
  grpc::Status finish;
  bool now = false;
  {
    base::MutexLock lock(&mu_);
    writing_ = false;
    queue_.pop_front();
    if (!ok) {
      // The agent went away; its read side fails too and ends the stream.
      write_failed_ = true;
      queue_.clear();
    }
    write = NextLocked();
    now = TakeFinishLocked(&finish);
  }
  Start(write, now, finish);
}

bool StreamLink::Idle() {
  base::MutexLock lock(&mu_);
  return stream_ == nullptr || finish_wanted_ || write_failed_ || (queue_.empty() && !writing_);
}

void StreamLink::Detach() {
  base::MutexLock lock(&mu_);
  stream_ = nullptr;
  queue_.clear();
}

bool StreamLink::Finishing() {
  base::MutexLock lock(&mu_);
  return finish_wanted_;
}

// --- AgentStream ---

AgentStream::AgentStream(StreamHost* host, grpc::CallbackServerContext* context)
    : host_(host), context_(context), link_(std::make_shared<StreamLink>(this)) {
  // The token passed the server's gate (control/token_gate.h); agents also need a client
  // certificate when the launcher uses TLS (tls_grpc.h).
  grpc::Status auth = control::CheckAgentCertificate(*context);
  if (!auth.ok()) {
    Refuse(auth);
    return;
  }
  StartRead(&in_);
}

void AgentStream::Refuse(const grpc::Status& status) {
  link_->End(status);
}

void AgentStream::OnReadDone(bool ok) {
  if (!ok) {
    ReadSideEnded();
  } else if (!registered_) {
    Register();
  } else {
    host_->agents()->Touch(id_, link_.get());
    if (std::optional<InboxEntry> entry = Translate(in_)) {
      Queue(std::move(*entry), Then::kRead);
    } else {
      Continue(Then::kRead);
    }
  }
}

void AgentStream::ReadSideEnded() {
  if (read_side_ended_) return;
  read_side_ended_ = true;
  if (!registered_) {
    Refuse(grpc::Status(grpc::StatusCode::CANCELLED, "the agent closed before registering"));
    return;
  }
  AgentInfo stopped;
  const bool said_goodbye = host_->agents()->Disconnected(id_, link_.get(), &stopped);
  // A job failing now names this agent as its cause (a no-op when a newer stream took over).
  StreamEnded ended;
  if (said_goodbye) ended.stopped = std::move(stopped);
  Queue(std::move(ended), Then::kEnd);
}

void AgentStream::Queue(InboxEntry entry, Then then) {
  if (host_->inbox()->Post(queue_, entry, std::chrono::steady_clock::now())) {
    Continue(then);
    return;
  }
  parked_ = std::move(entry);
  parked_then_ = then;
  link_->Hold();
  host_->Park(link_.get(), id_);
  if (!host_->inbox()->WhenRoom(queue_, [this] { Resume(); })) Resume();  // room already
}

void AgentStream::Resume() {
  host_->Unpark(link_.get());
  host_->agents()->Touch(id_, link_.get());        // what it sent waited in the socket
  const std::shared_ptr<StreamLink> link = link_;  // Release may end the reactor
  Queue(std::move(parked_), parked_then_);
  link->Release();  // the last use: the reactor may be gone after it
}

void AgentStream::Continue(Then then) {
  if (then == Then::kEnd) {
    if (linked_) host_->RemoveLink(link_.get());
    linked_ = false;
    link_->End(grpc::Status::OK);
  } else if (link_->Finishing()) {
    ReadSideEnded();  // closed by the launcher: no read is in flight to say so
  } else {
    StartRead(&in_);
  }
}

void AgentStream::Register() {
  if (!in_.has_register_()) {
    Refuse(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "the first message on AgentGateway.Connect must be AgentInfo "
                        "(register); is the agent the same hvd version as the launcher?"));
    return;
  }
  // Every field against the limits hvd-agent and hvdrun keep (control/spec_limits.h) before the
  // registry or placement sees it: one registration with slots=2147483647 once wedged the launcher.
  Status valid = control::ValidateAgentInfo(in_.register_());
  if (!valid.ok()) {
    HVD_LOG(WARNING) << "refused an agent registration from " << context_->peer() << ": "
                     << control::LogEscape(valid.message(), 1024);
    Refuse(control::ToGrpc(valid));
    return;
  }
  if (!host_->AddLink(link_.get())) {
    Refuse(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                        "the launcher is shutting down; reconnect when it is back"));
    return;
  }
  linked_ = true;
  // Two connected agents never share a host name (AgentRegistry::RegisterUnique says why).
  Status unique = host_->agents()->RegisterUnique(FromProto(in_.register_()), link_, &id_);
  if (!unique.ok()) {
    HVD_LOG(WARNING) << "refused an agent registration from " << context_->peer() << ": "
                     << control::LogEscape(unique.message(), 1024);
    host_->RemoveLink(link_.get());
    linked_ = false;
    Refuse(control::ToGrpc(unique));
    return;
  }
  registered_ = true;
  v1::LauncherMessage ack;
  ack.mutable_ack()->set_agent_id(id_);
  ack.mutable_ack()->set_heartbeat_interval_ms(host_->heartbeat_interval().count());
  ack.mutable_ack()->set_lease_ms(host_->lease().count());
  ack.mutable_ack()->set_acks_rank_events(true);  // AgentInbox::Apply acks what it applied
  // From here on reads only renew the lease and queue: JobManager applies the queue on the
  // inbox's thread (agent_inbox.h says why).
  queue_ = host_->inbox()->Open(id_, link_, in_.register_().incarnation());
  link_->Ready(std::move(ack));
  Queue(StreamRegistered{}, Then::kRead);
}

std::optional<InboxEntry> AgentStream::Translate(v1::AgentMessage& m) {
  switch (m.msg_case()) {
    case v1::AgentMessage::kHeartbeat:
      return AgentReport(HeartbeatReport{
          {m.heartbeat().running_jobs().begin(), m.heartbeat().running_jobs().end()}});
    case v1::AgentMessage::kRankEvent:
      return AgentReport(FromProto(m.rank_event()));
    case v1::AgentMessage::kOutput: {
      OutputReport output;
      output.job_id = m.output().job_id();
      output.lines.reserve(m.output().lines_size());
      for (const v1::OutputLine& l : m.output().lines()) output.lines.push_back(FromProto(l));
      return AgentReport(std::move(output));
    }
    case v1::AgentMessage::kGoodbye:
      // Noted here, on the stream's thread, before its end can be: the end then makes it
      // STOPPED (AgentRegistry::Disconnected), and JobManager hears of it in order with the
      // stream's reports (StreamEnded). Its ranks' ends came before it on the stream (the agent
      // flushes its outbox first, for up to 2 s, acks included).
      host_->agents()->Stopping(id_, link_.get(), m.goodbye().reason());
      return std::nullopt;
    case v1::AgentMessage::kProbeReport:
      return FromProto(m.probe_report());
    case v1::AgentMessage::kMasterPort:
      return AgentReport(MasterPortAnswer{m.master_port().request_id(), m.master_port().port(),
                                          m.master_port().error()});
    default:
      HVD_LOG(WARNING) << "agent " << id_ << " sent an unexpected message (case " << m.msg_case()
                       << "); ignored";
      return std::nullopt;
  }
}

void AgentStream::OnDone() {
  if (linked_) host_->RemoveLink(link_.get());
  host_->Unpark(link_.get());
  link_->Detach();
  delete this;
}

}  // namespace hvd::launcherd
