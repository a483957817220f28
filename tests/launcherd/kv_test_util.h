// Helpers for the rendezvous endpoint's tests (kv_server_test.cc, kv_server_limits_test.cc,
// nccl_id_rendezvous_test.cc): a fixture with an endpoint the runtime's client reaches, a bare
// protocol client for what the runtime's client never sends, and small status checks.
#pragma once

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <string>

#include "base/kv_protocol.h"
#include "hvd/status.h"
#include "launcherd/kv_server.h"

namespace hvd::launcherd::kvtest {

namespace kv = base::kv;

// An endpoint on 127.0.0.1 (url_: "hvd://HOST:PORT") for the runtime's own client, with the
// environment that client reads set for each test and unset after: HVD_JOB_SECRET = `secret`
// (which `resolver` must know) and a 5 s rendezvous timeout.
class EndpointTest : public ::testing::Test {
 protected:
  EndpointTest(std::string secret, SecretResolver resolver)
      : secret_(std::move(secret)), resolver_(std::move(resolver)) {}
  void SetUp() override {
    setenv("HVD_JOB_SECRET", secret_.c_str(), 1);
    setenv("HVD_RENDEZVOUS_TIMEOUT_SECONDS", "5", 1);
    ASSERT_TRUE(KvServer::Start("127.0.0.1:0", &store_, resolver_, &server_).ok());
    url_ = "hvd://" + server_->address();
  }
  void TearDown() override {
    if (server_) server_->Stop();
    unsetenv("HVD_JOB_SECRET");
    unsetenv("HVD_RENDEZVOUS_TIMEOUT_SECONDS");
  }

  const std::string secret_;
  const SecretResolver resolver_;
  KvStore store_;
  std::unique_ptr<KvServer> server_;
  std::string url_;
};

inline bool Contains(const Status& s, const std::string& text) {
  return s.message().find(text) != std::string::npos;
}

inline int PortOf(const std::string& address) {
  return std::stoi(address.substr(address.rfind(':') + 1));
}

inline kv::Request Hello(const std::string& secret) {
  kv::Request r;
  r.op = kv::Op::kHello;
  r.secret = secret;
  return r;
}

// This process's resident memory (VmRSS), in KiB; 0 if unreadable.
inline long RssKiB() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return 0;
}

// A bare protocol client, for what the runtime's client never sends.
class RawConn {
 public:
  explicit RawConn(const std::string& address) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(PortOf(address)));
    EXPECT_EQ(connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    fcntl(fd_, F_SETFL, O_NONBLOCK);
  }
  ~RawConn() { Close(); }
  RawConn(const RawConn&) = delete;
  RawConn& operator=(const RawConn&) = delete;

  Status Call(const kv::Request& r, kv::Response* resp) {
    HVD_RETURN_IF_ERROR(Send(kv::EncodeRequest(r)));
    return Read(r.op, resp);
  }
  Status Read(kv::Op op, kv::Response* resp) {
    std::string payload;
    HVD_RETURN_IF_ERROR(ReadPayload(&payload));
    return kv::DecodeResponse(op, payload, resp);
  }
  Status ReadPayload(std::string* payload) {
    return kv::ReadFrame(fd_, payload, Deadline(), -1, "server");
  }
  Status Send(const std::string& payload) {
    return kv::WriteFrame(fd_, payload, Deadline(), -1, "server");
  }
  Status SendBytes(const std::string& bytes) {
    return send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) == ssize_t(bytes.size())
               ? Status::OK()
               : Internal("short send");
  }
  // True when the server closes the connection within 5 s.
  bool Closed() {
    std::string ignored;
    Status s = kv::ReadFrame(fd_, &ignored, Deadline(), -1, "server");
    return s.code() == StatusCode::kUnavailable && Contains(s, "closed");
  }
  void Close() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }

 private:
  static kv::Deadline Deadline() {
    return std::chrono::steady_clock::now() + std::chrono::seconds(5);
  }
  int fd_ = -1;
};

}  // namespace hvd::launcherd::kvtest
