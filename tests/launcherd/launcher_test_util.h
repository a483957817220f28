// A real Launcher on 127.0.0.1 and a test that speaks the agent protocol over the real
// AgentGateway stream (no fake of the launcher's side).
#pragma once

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <condition_variable>
#include <deque>
#include <thread>

#include "base/net.h"
#include "control/grpc_util.h"
#include "hvd/v1/agent.grpc.pb.h"
#include "hvd/v1/launcher.grpc.pb.h"
#include "launcherd/launcher.h"

namespace hvd::launcherd::testing {

inline constexpr const char* kToken = "launcher-test-token-0123456789";

// A REST client for the launcher's HTTP endpoint, with short timeouts; it sends `token` (the
// cluster token by default; "" for none) as the bearer token /v1/* needs.
inline httplib::Client Http(const Launcher& l, const std::string& token = kToken) {
  base::HostPort http;
  EXPECT_TRUE(base::ParseHostPort(l.http_address(), &http).ok());
  httplib::Client c(http.host, http.port);
  c.set_connection_timeout(5);
  c.set_read_timeout(5);
  if (!token.empty()) c.set_bearer_token_auth(token);
  return c;
}

using namespace std::chrono_literals;

inline std::unique_ptr<Launcher> StartLauncher(LauncherOptions o = {}) {
  o.listen = "127.0.0.1:0";
  if (o.http_listen.empty()) o.http_listen = "127.0.0.1:0";
  o.token = kToken;
  o.kill_grace = 1500ms;
  std::unique_ptr<Launcher> launcher;
  Status s = Launcher::Start(o, &launcher);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return launcher;
}

inline std::unique_ptr<grpc::ClientContext> Ctx(const std::string& token = kToken) {
  return control::NewClientContext(token, 10s);
}

// An agent as the agent engineer's code behaves on the wire: AgentInfo first, then events.
class StreamAgent {
 public:
  // `agent_id`: re-register under it; `incarnation`: AgentInfo.incarnation (0: an agent that
  // does not number its rank events, so the launcher sends it no RankEventAck).
  StreamAgent(const std::string& address, const std::string& host, int slots,
              const std::string& token = kToken, const std::string& agent_id = "",
              uint64_t incarnation = 0)
      : stub_(v1::AgentGateway::NewStub(control::NewChannel(address))),
        ctx_(control::NewClientContext(token)) {
    stream_ = stub_->Connect(ctx_.get());
    v1::AgentMessage m;
    m.mutable_register_()->set_agent_id(agent_id);
    m.mutable_register_()->set_incarnation(incarnation);
    m.mutable_register_()->set_host(host);
    m.mutable_register_()->set_advertise_addr("127.0.0.1");
    m.mutable_register_()->set_slots(slots);
    m.mutable_register_()->set_pid(4242);
    stream_->Write(m);
    reader_ = std::thread([this] {
      v1::LauncherMessage msg;
      while (stream_->Read(&msg)) {
        if (msg.has_master_port()) {  // answered at once, as hvd-agent does (agent/master_port.h)
          v1::AgentMessage answer;
          answer.mutable_master_port()->set_request_id(msg.master_port().request_id());
          answer.mutable_master_port()->set_port(29500);
          Send(answer);
          continue;
        }
        std::lock_guard<std::mutex> lock(mu_);
        inbox_.push_back(msg);
        cv_.notify_all();
      }
      std::lock_guard<std::mutex> lock(mu_);
      closed_ = true;
      cv_.notify_all();
    });
  }
  ~StreamAgent() { Close(); }

  // The next command from the launcher; false after `timeout` or when the stream ended.
  bool Next(v1::LauncherMessage* out, std::chrono::milliseconds timeout = 10s) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, timeout, [&] { return !inbox_.empty() || closed_; })) return false;
    if (inbox_.empty()) return false;
    *out = inbox_.front();
    inbox_.pop_front();
    return true;
  }
  // Waits for the stream to end; its status.
  grpc::Status WaitClosed(std::chrono::milliseconds timeout = 10s) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, timeout, [&] { return closed_; });
    }
    return Close();
  }
  void Send(const v1::AgentMessage& m) {
    std::lock_guard<std::mutex> lock(write_mu_);  // the reader thread answers MASTER_PORT too
    stream_->Write(m);
  }
  void Event(const std::string& job, int rank, v1::RankState state, int code = 0,
             const std::string& tail = "") {
    v1::AgentMessage m;
    v1::RankEvent* e = m.mutable_rank_event();
    e->set_job_id(job);
    e->set_rank(rank);
    e->set_state(state);
    e->set_pid(5000 + rank);
    e->set_exit_code(code);
    e->set_stderr_tail(tail);
    Send(m);
  }
  void Output(const std::string& job, int rank, const std::string& text) {
    v1::AgentMessage m;
    m.mutable_output()->set_job_id(job);
    v1::OutputLine* l = m.mutable_output()->add_lines();
    l->set_rank(rank);
    l->set_text(text);
    Send(m);
  }
  grpc::Status Close() {
    if (!reader_.joinable()) return status_;
    {
      // Cancelling a stream that already ended would replace the launcher's status.
      std::lock_guard<std::mutex> lock(mu_);
      if (!closed_) ctx_->TryCancel();
    }
    reader_.join();
    status_ = stream_->Finish();
    return status_;
  }

 private:
  std::unique_ptr<v1::AgentGateway::Stub> stub_;
  std::unique_ptr<grpc::ClientContext> ctx_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::AgentMessage, v1::LauncherMessage>> stream_;
  std::thread reader_;
  std::mutex write_mu_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<v1::LauncherMessage> inbox_;
  bool closed_ = false;
  grpc::Status status_;
};

// Polls GetJob until `pred` holds (bounded).
template <typename Pred>
v1::JobStatus WaitJob(v1::Launcher::Stub& stub, const std::string& id, Pred pred) {
  v1::JobStatus st;
  for (int i = 0; i < 500; ++i) {
    v1::GetJobRequest req;
    req.set_job_id(id);
    st.Clear();
    grpc::Status s = stub.GetJob(Ctx().get(), req, &st);
    EXPECT_TRUE(s.ok()) << s.error_message();
    if (!s.ok() || pred(st)) return st;
    std::this_thread::sleep_for(20ms);
  }
  ADD_FAILURE() << "job " << id
                << " never reached the expected state; last: " << st.ShortDebugString();
  return st;
}

}  // namespace hvd::launcherd::testing
