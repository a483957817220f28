// HttpGate on a real 127.0.0.1 listener with short limits: slow heads are answered 408 and
// closed, idle connections closed, oversized heads and bodies refused before they are read, the
// connection cap lets a newcomer in by closing the oldest waiting connection, and keep-alive
// connections come back for their next request. Every refusal is logged once per peer.
#include "launcherd/http_gate.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cstring>

#include <atomic>
#include <thread>

#include "testutil/expect.h"
#include "testutil/http_get.h"

namespace hvd::launcherd {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// A listener whose accepted connections go to a gate that answers "200 served N" to each request
// (reading exactly its bytes, as the REST server does).
class GateFixture : public ::testing::Test {
 protected:
  void Start(HttpLimits limits) {
    limits_ = limits;
    listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    ASSERT_EQ(listen(listen_fd_, 512), 0);
    socklen_t n = sizeof a;
    getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &n);
    port_ = ntohs(a.sin_port);
    Status s = HttpGate::Start(
        limits,
        [this](const GatedRequest& r) {
          std::string req(r.head_bytes + r.body_bytes, '\0');
          size_t got = 0;
          while (got < req.size()) {
            pollfd p{r.fd, POLLIN, 0};
            if (poll(&p, 1, 2000) != 1) return false;
            ssize_t k = recv(r.fd, req.data() + got, req.size() - got, 0);
            if (k <= 0) return false;
            got += static_cast<size_t>(k);
          }
          const std::string body = "served " + std::to_string(++served_);
          const std::string answer =
              "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" +
              body;
          return send(r.fd, answer.data(), answer.size(), MSG_NOSIGNAL) ==
                 static_cast<ssize_t>(answer.size());
        },
        &gate_);
    ASSERT_TRUE(s.ok()) << s.ToString();
    acceptor_ = std::thread([this] {
      while (true) {
        int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd < 0) return;  // shutdown() below
        gate_->Admit(fd);
      }
    });
  }
  void TearDown() override {
    if (listen_fd_ >= 0) shutdown(listen_fd_, SHUT_RDWR);
    if (acceptor_.joinable()) acceptor_.join();
    if (gate_) gate_->Stop();
    if (listen_fd_ >= 0) close(listen_fd_);
    for (int fd : clients_) close(fd);
  }

  int Connect() {
    const int fd = hvd::testing::ConnectLoopback(port_);
    EXPECT_GE(fd, 0) << std::strerror(errno);
    clients_.push_back(fd);
    return fd;
  }
  static void Send(int fd, const std::string& s) {
    ASSERT_EQ(send(fd, s.data(), s.size(), MSG_NOSIGNAL), static_cast<ssize_t>(s.size()));
  }
  // One answer (up to its Content-Length), or everything until the close; "" on a timeout.
  static std::string Answer(int fd) {
    std::string out;
    char buf[4096];
    while (true) {
      const size_t end = out.find("\r\n\r\n");
      if (end != std::string::npos) {
        const size_t cl = out.find("Content-Length: ");
        if (cl != std::string::npos && out.size() >= end + 4 + std::stoul(out.substr(cl + 16))) {
          return out;
        }
      }
      ssize_t n = recv(fd, buf, sizeof buf, 0);
      if (n <= 0) return out;
      out.append(buf, static_cast<size_t>(n));
    }
  }
  // Whether the server closed `fd` (EOF or reset) within `within`.
  static bool ClosedWithin(int fd, std::chrono::milliseconds within) {
    const auto deadline = Clock::now() + within;
    char buf[4096];
    while (Clock::now() < deadline) {
      pollfd p{fd, POLLIN, 0};
      if (poll(&p, 1, 50) == 1) {
        ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN)) return true;
      }
    }
    return false;
  }

  HttpLimits limits_;
  int listen_fd_ = -1, port_ = 0;
  std::unique_ptr<HttpGate> gate_;
  std::thread acceptor_;
  std::atomic<int> served_{0};
  std::vector<int> clients_;
};

HttpLimits Short() {
  HttpLimits l;
  l.idle_timeout = 600ms;
  l.head_timeout = 600ms;
  l.max_connections = 16;
  l.max_head_bytes = 1024;
  l.max_body_bytes = 100;
  l.workers = 2;
  return l;
}

TEST_F(GateFixture, ASlowHeadIsAnswered408AndLoggedOnce) {
  ::testing::internal::CaptureStderr();
  Start(Short());
  std::vector<int> slow;
  for (int i = 0; i < 4; ++i) {
    slow.push_back(Connect());
    Send(slow.back(), "GET / HTTP/1.1\r\nX-Slow: ");
  }
  // A byte every 100 ms never completes the head; meanwhile whole requests are served at once.
  const auto start = Clock::now();
  for (int i = 0; i < 4; ++i) {
    for (int fd : slow) send(fd, "a", 1, MSG_NOSIGNAL);
    int fd = Connect();
    Send(fd, "GET / HTTP/1.1\r\n\r\n");
    EXPECT_HAS(Answer(fd), "200 OK");
    std::this_thread::sleep_for(100ms);
  }
  for (int fd : slow) {
    const std::string a = Answer(fd);
    EXPECT_HAS(a, "408 Request Timeout");
  }
  EXPECT_LT(Clock::now() - start, 2s);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_HAS(err, "REST: closed a connection from 127.0.0.1:");
  EXPECT_HAS(err, "its request head was not complete 600 ms after its first byte");
  size_t lines = 0;
  for (size_t p = 0; (p = err.find("REST: closed", p)) != std::string::npos; ++p) ++lines;
  EXPECT_EQ(lines, 1u) << "refusals from one peer are rate limited:\n" << err;
}

TEST_F(GateFixture, AnIdleConnectionIsClosedQuietly) {
  Start(Short());
  int fd = Connect();
  EXPECT_TRUE(ClosedWithin(fd, 2s));
}

TEST_F(GateFixture, KeepAliveConnectionsComeBackForTheNextRequest) {
  Start(Short());
  int fd = Connect();
  for (int i = 1; i <= 3; ++i) {
    Send(fd, "GET / HTTP/1.1\r\n\r\n");
    EXPECT_HAS(Answer(fd), "served");
  }
  // Two pipelined in one segment: the second stays in the socket for the gate and is served too.
  Send(fd, "GET /a HTTP/1.1\r\n\r\nGET /b HTTP/1.1\r\n\r\n");
  EXPECT_HAS(Answer(fd), "served 4");
  EXPECT_HAS(Answer(fd), "served 5");
}

TEST_F(GateFixture, OversizedHeadsAndBodiesAreRefusedBeforeTheyAreRead) {
  Start(Short());
  int fd = Connect();
  Send(fd, "GET / HTTP/1.1\r\nX-Big: " + std::string(2000, 'x'));
  EXPECT_HAS(Answer(fd), "431 Request Header Fields Too Large");
  fd = Connect();
  Send(fd, "POST / HTTP/1.1\r\nContent-Length: 268435456\r\n\r\n");
  std::string a = Answer(fd);
  EXPECT_HAS(a, "413 Payload Too Large");
  EXPECT_HAS(a, "268435456 bytes is over the limit of 100");
  fd = Connect();
  Send(fd, "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n");
  EXPECT_HAS(Answer(fd), "411 Length Required");
  fd = Connect();
  Send(fd, "POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n");
  EXPECT_HAS(Answer(fd), "400 Bad Request");
  // Within the limit a body is the server's to read.
  fd = Connect();
  Send(fd, "POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello");
  EXPECT_HAS(Answer(fd), "200 OK");
  EXPECT_EQ(served_.load(), 1);
}

TEST_F(GateFixture, AtTheCapTheOldestWaitingConnectionMakesRoom) {
  ::testing::internal::CaptureStderr();
  Start(Short());
  std::vector<int> idle;
  for (int i = 0; i < 40; ++i) idle.push_back(Connect());
  // 40 idle connections against a cap of 16: each newcomer closed the oldest, and a request now
  // still gets in and is served.
  int fd = Connect();
  Send(fd, "GET / HTTP/1.1\r\n\r\n");
  EXPECT_HAS(Answer(fd), "200 OK");
  EXPECT_TRUE(ClosedWithin(idle.front(), 500ms)) << "the oldest idle connection is still open";
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_HAS(err, "REST: 16 connections open (the cap): closed one from 127.0.0.1:");
}

}  // namespace
}  // namespace hvd::launcherd
