#include "agent/launcher_client.h"

#include <thread>

#include "control/grpc_util.h"
#include "control/job_state_proto.h"

namespace hvd::agent {

RankSpec RankSpecFromProto(const hvd::v1::StartRank& p) {
  RankSpec r;
  r.job_id = p.job_id();
  r.attempt = p.attempt();
  r.rank = p.placement().rank();
  r.slot = p.placement().slot();
  r.local_rank = p.placement().local_rank();
  r.argv.assign(p.argv().begin(), p.argv().end());
  r.env.insert(p.env().begin(), p.env().end());
  r.working_dir = p.working_dir();
  r.forward_stdin = p.forward_stdin();
  r.run_as = p.run_as();
  r.gpu_isolation = p.gpu_isolation();
  return r;
}

void ToProto(const RankReport& r, hvd::v1::RankEvent* p) {
  p->set_job_id(r.job_id);
  p->set_attempt(r.attempt);
  p->set_rank(r.rank);
  p->set_state(control::RankStateToProto(r.state));
  p->set_pid(r.pid);
  p->set_exit_code(r.exit_code);
  p->set_signal(r.signal);
  p->set_error(r.error);
  p->set_stderr_tail(r.stderr_tail);
  p->set_time_ms(r.time_ms);
}

LauncherStream::LauncherStream(const std::shared_ptr<grpc::Channel>& channel, std::string address,
                               const std::string& token)
    : address_(std::move(address)),
      context_(control::NewClientContext(token)),
      stub_(hvd::v1::AgentGateway::NewStub(channel)) {}

Status LauncherStream::Register(const hvd::v1::AgentInfo& info, std::chrono::milliseconds timeout,
                                hvd::v1::RegisterAck* ack) {
  const std::string what = "launcher at " + address_;
  hvd::v1::AgentMessage reg;
  *reg.mutable_register_() = info;
  hvd::v1::LauncherMessage first;
  bool got = false;
  {
    // Starting the call and the first write and read block while gRPC connects, and a peer that
    // accepts the stream but never answers must not hang the agent: they run on a helper thread
    // and the call is cancelled at the deadline.
    base::Mutex mu;
    base::CondVar cv;
    bool done = false;
    std::thread opener([&] {
      bool ok;
      {
        base::MutexLock lock(&write_mu_);
        stream_ = stub_->Connect(context_.get());
        ok = stream_->Write(reg);
      }
      ok = ok && stream_->Read(&first);
      base::MutexLock lock(&mu);
      got = ok;
      done = true;
      cv.NotifyAll();
    });
    {
      base::MutexLock lock(&mu);
      if (!cv.WaitFor(lock, timeout, [&]() HVD_REQUIRES(mu) { return done; }))
        context_->TryCancel();
      cv.Wait(lock, [&]() HVD_REQUIRES(mu) { return done; });
    }
    opener.join();
  }
  if (!got) {
    Status st = Finish();
    if (st.ok() || st.code() == StatusCode::kCancelled) {
      return Unavailable(what + ": no RegisterAck within " + std::to_string(timeout.count()) +
                         " ms (is that address the launcher's gRPC endpoint?)");
    }
    return st;
  }
  if (first.msg_case() != hvd::v1::LauncherMessage::kAck) {
    Cancel();
    Finish();
    return Internal(what + " sent message " + std::to_string(first.msg_case()) +
                    " before RegisterAck; agent and launcher versions may not match");
  }
  *ack = first.ack();
  return Status::OK();
}

LauncherStream::~LauncherStream() {
  Cancel();
  Finish();
}

bool LauncherStream::Read(hvd::v1::LauncherMessage* msg) {
  return stream_ != nullptr && stream_->Read(msg);
}

bool LauncherStream::Write(const hvd::v1::AgentMessage& msg) {
  base::MutexLock lock(&write_mu_);
  if (write_failed_ || finished_ || stream_ == nullptr) return false;
  if (!stream_->Write(msg)) write_failed_ = true;
  return !write_failed_;
}

bool LauncherStream::WritesDone() {
  base::MutexLock lock(&write_mu_);
  if (write_failed_ || finished_ || stream_ == nullptr) return false;
  if (!stream_->WritesDone()) write_failed_ = true;
  return !write_failed_;
}

void LauncherStream::Cancel() {
  context_->TryCancel();
}

Status LauncherStream::Finish() {
  // No Write may run during Finish; a Write blocked on a dead stream fails once the call ends.
  base::MutexLock lock(&write_mu_);
  if (finished_ || stream_ == nullptr) return final_status_;
  finished_ = true;
  grpc::Status st = stream_->Finish();
  if (st.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
      st.error_code() == grpc::StatusCode::PERMISSION_DENIED) {
    // The launcher's token gate already says what to do ("use the launcher's token file").
    final_status_ = FailedPrecondition("launcher at " + address_ +
                                       " refused this agent: " + st.error_message());
  } else {
    final_status_ = control::FromGrpc(st, "launcher at " + address_);
  }
  return final_status_;
}

}  // namespace hvd::agent
