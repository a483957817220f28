#include "launcherd/agent_gateway_service.h"

#include <deque>
#include <thread>

#include "base/logging.h"
#include "control/grpc_util.h"
#include "control/log_escape.h"
#include "control/spec_limits.h"
#include "control/tls_grpc.h"
#include "launcherd/network_convert.h"
#include "launcherd/proto_convert.h"
#include "launcherd/stdin_service.h"

namespace hvd::launcherd {

using Stream = grpc::ServerReaderWriter<v1::LauncherMessage, v1::AgentMessage>;

// One agent's stream as an AgentLink: Send* queue, a writer thread writes. The first message
// written is always the RegisterAck (Ready()), even when JobManager queued commands before it.
class StreamLink final : public AgentLink {
 public:
  StreamLink(grpc::ServerContext* context, Stream* stream) : context_(context), stream_(stream) {}

  bool SendStartRank(const StartRankCommand& command) override {
    v1::LauncherMessage m;
    ToProto(command, m.mutable_start());
    return Enqueue(std::move(m), /*front=*/false);
  }
  bool SendStopJob(const StopJobCommand& command) override {
    v1::LauncherMessage m;
    ToProto(command, m.mutable_stop());
    return Enqueue(std::move(m), /*front=*/false);
  }
  bool SendProbe(const ProbeCommand& command) override {
    v1::LauncherMessage m;
    ToProto(command, m.mutable_probe());
    return Enqueue(std::move(m), /*front=*/false);
  }
  bool SendMasterPort(const MasterPortCommand& command) override {
    v1::LauncherMessage m;
    m.mutable_master_port()->set_request_id(command.request_id);
    m.mutable_master_port()->set_job_id(command.job_id);
    return Enqueue(std::move(m), /*front=*/false);
  }
  bool SendRankEventAck(uint64_t through_seq) override {
    v1::LauncherMessage m;
    m.mutable_event_ack()->set_through_seq(through_seq);
    return Enqueue(std::move(m), /*front=*/false);
  }
  void Close() override {
    base::MutexLock lock(&mu_);
    closed_ = true;
    cv_.NotifyAll();
    // Wakes the handler's blocked Read; never after the handler returned (the context is gone).
    if (!finished_) context_->TryCancel();
  }

  // Queues the ack ahead of everything and lets the writer start.
  void Ready(v1::LauncherMessage ack) {
    Enqueue(std::move(ack), /*front=*/true);
    base::MutexLock lock(&mu_);
    ready_ = true;
    cv_.NotifyAll();
  }
  // The handler is returning: stop writing and never touch the context again.
  void Finish() {
    base::MutexLock lock(&mu_);
    // A Write blocked on an agent that stopped reading ends only when the call is cancelled.
    if (writing_ && !finished_) context_->TryCancel();
    closed_ = finished_ = true;
    cv_.NotifyAll();
  }
  bool Idle() {
    base::MutexLock lock(&mu_);
    return closed_ || (queue_.empty() && !writing_);
  }

  void WriterLoop() {
    base::MutexLock lock(&mu_);
    while (true) {
      cv_.Wait(lock, [&]() HVD_REQUIRES(mu_) { return closed_ || (ready_ && !queue_.empty()); });
      if (closed_) return;
      v1::LauncherMessage m = std::move(queue_.front());
      queue_.pop_front();
      writing_ = true;
      lock.Unlock();
      const bool ok = stream_->Write(m);
      lock.Lock();
      writing_ = false;
      if (!ok) {
        closed_ = true;  // the agent went away; its handler's Read fails too
        return;
      }
    }
  }

 private:
  bool Enqueue(v1::LauncherMessage m, bool front) {
    base::MutexLock lock(&mu_);
    if (closed_) return false;
    if (front) {
      queue_.push_front(std::move(m));
    } else {
      queue_.push_back(std::move(m));
    }
    cv_.NotifyAll();
    return true;
  }

  grpc::ServerContext* const context_;
  Stream* const stream_;
  base::Mutex mu_;
  base::CondVar cv_;
  std::deque<v1::LauncherMessage> queue_ HVD_GUARDED_BY(mu_);
  bool ready_ HVD_GUARDED_BY(mu_) = false;
  bool closed_ HVD_GUARDED_BY(mu_) = false;
  bool finished_ HVD_GUARDED_BY(mu_) = false;
  bool writing_ HVD_GUARDED_BY(mu_) = false;
};

grpc::Status AgentGatewayService::Connect(grpc::ServerContext* context, Stream* stream) {
  // The token passed the server's gate (control/token_gate.h); agents also need a client
  // certificate when the launcher uses TLS (tls_grpc.h).
  grpc::Status auth = control::CheckAgentCertificate(*context);
  if (!auth.ok()) return auth;
  v1::AgentMessage first;
  if (!stream->Read(&first)) {
    return grpc::Status(grpc::StatusCode::CANCELLED, "the agent closed before registering");
  }
  if (!first.has_register_()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "the first message on AgentGateway.Connect must be AgentInfo "
                        "(register); is the agent the same hvd version as the launcher?");
  }
  // Every field against the limits hvd-agent and hvdrun keep (control/spec_limits.h) before the
  // registry or placement sees it: one registration with slots=2147483647 once wedged the launcher.
  Status valid = control::ValidateAgentInfo(first.register_());
  if (!valid.ok()) {
    HVD_LOG(WARNING) << "refused an agent registration from " << context->peer() << ": "
                     << control::LogEscape(valid.message(), 1024);
    return control::ToGrpc(valid);
  }
  AgentInfo info = FromProto(first.register_());

  auto link = std::make_shared<StreamLink>(context, stream);
  {
    base::MutexLock lock(&mu_);
    if (closed_) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                          "the launcher is shutting down; reconnect when it is back");
    }
    links_.insert(link.get());
  }
  // Two connected agents never share a host name (AgentRegistry::RegisterUnique says why).
  std::string id;
  Status unique = agents_->RegisterUnique(info, link, &id);
  if (!unique.ok()) {
    HVD_LOG(WARNING) << "refused an agent registration from " << context->peer() << ": "
                     << control::LogEscape(unique.message(), 1024);
    base::MutexLock lock(&mu_);
    links_.erase(link.get());
    return control::ToGrpc(unique);
  }
  std::thread writer([&link] { link->WriterLoop(); });
  v1::LauncherMessage ack;
  ack.mutable_ack()->set_agent_id(id);
  ack.mutable_ack()->set_heartbeat_interval_ms(heartbeat_interval_.count());
  ack.mutable_ack()->set_lease_ms(lease_.count());
  ack.mutable_ack()->set_acks_rank_events(true);  // AgentInbox::Apply acks what it applied
  link->Ready(std::move(ack));

  // From here on this thread only reads, renews the lease and queues: JobManager applies the
  // queue on the inbox's thread (agent_inbox.h says why).
  std::shared_ptr<AgentInbox::Stream> queue =
      inbox_.Open(id, link, first.register_().incarnation());
  auto post = [&](InboxEntry entry) {
    // A full queue means the launcher is behind, not the agent: it stays alive meanwhile.
    while (!inbox_.Post(queue, entry, std::chrono::steady_clock::now() + lease_ / 4)) {
      agents_->Touch(id, link.get());
    }
  };
  post(StreamRegistered{});
  v1::AgentMessage m;
  while (stream->Read(&m)) {
    agents_->Touch(id, link.get());
    switch (m.msg_case()) {
      case v1::AgentMessage::kHeartbeat:
        post(AgentReport(HeartbeatReport{
            {m.heartbeat().running_jobs().begin(), m.heartbeat().running_jobs().end()}}));
        break;
      case v1::AgentMessage::kRankEvent:
        post(AgentReport(FromProto(m.rank_event())));
        break;
      case v1::AgentMessage::kOutput: {
        OutputReport output;
        output.job_id = m.output().job_id();
        output.lines.reserve(m.output().lines_size());
        for (const v1::OutputLine& l : m.output().lines()) output.lines.push_back(FromProto(l));
        post(AgentReport(std::move(output)));
        break;
      }
      case v1::AgentMessage::kProbeReport:
        post(FromProto(m.probe_report()));
        break;
      case v1::AgentMessage::kMasterPort:
        post(AgentReport(MasterPortAnswer{m.master_port().request_id(), m.master_port().port(),
                                          m.master_port().error()}));
        break;
      default:
        HVD_LOG(WARNING) << "agent " << id << " sent an unexpected message (case " << m.msg_case()
                         << "); ignored";
    }
  }
  agents_->Disconnected(id, link.get());
  // A job failing now names this agent as its cause (a no-op when a newer stream took over).
  post(StreamEnded{});
  {
    base::MutexLock lock(&mu_);
    links_.erase(link.get());
  }
  link->Finish();
  writer.join();
  return grpc::Status::OK;
}

grpc::Status AgentGatewayService::ReadStdin(grpc::ServerContext* context,
                                            const v1::ReadStdinRequest* request,
                                            grpc::ServerWriter<v1::StdinData>* writer) {
  grpc::Status auth = control::CheckAgentCertificate(*context);
  if (!auth.ok()) return auth;
  return ServeReadStdin(jobs_, context, *request, writer);
}

void AgentGatewayService::Close() {
  base::MutexLock lock(&mu_);
  closed_ = true;
}

void AgentGatewayService::Drain(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    bool idle = true;
    {
      base::MutexLock lock(&mu_);
      for (StreamLink* link : links_) idle &= link->Idle();
    }
    if (idle) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace hvd::launcherd
