#include "agent/launcher_client.h"

#include <condition_variable>
#include <thread>

#include "control/grpc_util.h"
#include "control/tls_grpc.h"

namespace hvd::agent {

std::shared_ptr<grpc::Channel> NewLauncherChannel(const std::string& address,
                                                  const control::TlsConfig& tls) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_ENABLE_RETRIES, 0);
  // Keepalive notices a launcher host that vanished without closing the connection; the launcher
  // must permit pings this often (GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS).
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  // Output batches are capped at 1 MiB; commands are small. The defaults (4 MiB) suffice.
  return grpc::CreateCustomChannel(address, control::ChannelCredentialsFor(tls), args);
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
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    std::thread opener([&] {
      bool ok;
      {
        std::lock_guard<std::mutex> lock(write_mu_);
        stream_ = stub_->Connect(context_.get());
        ok = stream_->Write(reg);
      }
      ok = ok && stream_->Read(&first);
      std::lock_guard<std::mutex> lock(mu);
      got = ok;
      done = true;
      cv.notify_all();
    });
    {
      std::unique_lock<std::mutex> lock(mu);
      if (!cv.wait_for(lock, timeout, [&] { return done; })) context_->TryCancel();
      cv.wait(lock, [&] { return done; });
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
  std::lock_guard<std::mutex> lock(write_mu_);
  if (write_failed_ || finished_ || stream_ == nullptr) return false;
  if (!stream_->Write(msg)) write_failed_ = true;
  return !write_failed_;
}

void LauncherStream::Cancel() {
  context_->TryCancel();
}

Status LauncherStream::Finish() {
  // No Write may run during Finish; a Write blocked on a dead stream fails once the call ends.
  std::lock_guard<std::mutex> lock(write_mu_);
  if (finished_ || stream_ == nullptr) return final_status_;
  finished_ = true;
  grpc::Status st = stream_->Finish();
  if (st.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
      st.error_code() == grpc::StatusCode::PERMISSION_DENIED) {
    // control::CheckToken's message already says what to do ("use the launcher's token file").
    final_status_ = FailedPrecondition("launcher at " + address_ +
                                       " refused this agent: " + st.error_message());
  } else {
    final_status_ = control::FromGrpc(st, "launcher at " + address_);
  }
  return final_status_;
}

}  // namespace hvd::agent
