// The rendezvous endpoint over TLS (hvds://, docs/security.md "TLS"): the launcher's KvServer with
// certificates from scripts/gen-certs.sh, driven by the runtime's own client (OpenStore). What
// crosses the wire is checked through a relay that records it: neither the job secret nor a value
// may appear in clear. Wrong CAs, a certificate that names another host, and each side speaking
// the other protocol fail at once (no retrying until the rendezvous timeout) with messages that
// say what to fix.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "launcherd/kv_server.h"
#include "rendezvous/store.h"
#include "tests/launcherd/kv_test_util.h"

namespace hvd::launcherd {
namespace {

using runtime::rendezvous::OpenStore;
using runtime::rendezvous::Store;
using Clock = std::chrono::steady_clock;
using kvtest::Contains;
using kvtest::PortOf;

bool Resolve(const std::string& secret, std::string* prefix) {
  if (secret != "tls-secret-7f3a") return false;
  *prefix = "job/t/";
  return true;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A TCP relay on 127.0.0.1 that records the bytes a client sends, for one connection.
class Tap {
 public:
  explicit Tap(int target_port) : target_port_(target_port) {
    listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(listen(listen_fd_, 4), 0);
    socklen_t len = sizeof a;
    getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { Relay(); });
  }
  ~Tap() {
    stop_ = true;
    thread_.join();
    close(listen_fd_);
  }
  int port() const { return port_; }
  std::string seen() {
    std::lock_guard<std::mutex> lock(mu_);
    return seen_;
  }

 private:
  void Relay() {
    pollfd p{listen_fd_, POLLIN, 0};
    const auto end = Clock::now() + std::chrono::seconds(20);
    while (!stop_ && Clock::now() < end && poll(&p, 1, 50) == 0) {
    }
    if (stop_ || !(p.revents & POLLIN)) return;
    const int client = accept(listen_fd_, nullptr, nullptr);
    const int server = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(target_port_));
    if (client < 0 || connect(server, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return;
    pollfd fds[2] = {{client, POLLIN, 0}, {server, POLLIN, 0}};
    char buf[16384];
    while (!stop_ && Clock::now() < end) {
      if (poll(fds, 2, 50) <= 0) continue;
      bool done = false;
      for (int i = 0; i < 2; ++i) {
        if (!fds[i].revents) continue;
        const ssize_t n = read(fds[i].fd, buf, sizeof buf);
        if (n <= 0) {
          done = true;
          break;
        }
        if (i == 0) {
          std::lock_guard<std::mutex> lock(mu_);
          seen_.append(buf, static_cast<size_t>(n));
        }
        (void)!write(fds[1 - i].fd, buf, static_cast<size_t>(n));
      }
      if (done) break;
    }
    close(client);
    close(server);
  }

  const int target_port_;
  int listen_fd_ = -1, port_ = 0;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::string seen_;
  std::thread thread_;
};

class KvServerTlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    char tmpl[] = "/tmp/hvd_kv_tls_test.XXXXXX";
    dir_ = new std::string(mkdtemp(tmpl));
    const std::string gen = std::string(HVD_SOURCE_DIR) + "/scripts/gen-certs.sh";
    // c: a CA that has revoked the launcher's certificate.
    const std::string cmd = gen + " --out " + *dir_ + "/a --hosts 127.0.0.1 2>/dev/null && " + gen +
                            " --out " + *dir_ + "/b --hosts 127.0.0.1 2>/dev/null && " + gen +
                            " --out " + *dir_ + "/c --hosts 127.0.0.1 2>/dev/null && " + gen +
                            " --out " + *dir_ + "/c --revoke 127.0.0.1 2>/dev/null";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
  static void TearDownTestSuite() {
    (void)!std::system(("rm -rf '" + *dir_ + "'").c_str());
    delete dir_;
  }
  static std::string F(const std::string& name) { return *dir_ + "/" + name; }

  void SetUp() override {
    setenv("HVD_JOB_SECRET", "tls-secret-7f3a", 1);
    setenv("HVD_RENDEZVOUS_TIMEOUT_SECONDS", "10", 1);
    setenv("HVD_RENDEZVOUS_CA", F("a/ca.crt").c_str(), 1);
  }
  void TearDown() override {
    if (server_) server_->Stop();
    unsetenv("HVD_JOB_SECRET");
    unsetenv("HVD_RENDEZVOUS_TIMEOUT_SECONDS");
    unsetenv("HVD_RENDEZVOUS_CA");
    unsetenv("HVD_RENDEZVOUS_CRL");
  }

  void StartServer(bool tls, const std::string& listen = "127.0.0.1:0",
                   KvServerOptions options = KvServerOptions(), const std::string& ca = "a") {
    if (tls) {
      options.tls.cert_pem = ReadFile(F(ca + "/127.0.0.1.crt"));
      options.tls.key_pem = ReadFile(F(ca + "/127.0.0.1.key"));
      options.tls.ca_pem = ReadFile(F(ca + "/ca.crt"));
    }
    Status s = KvServer::Start(listen, &store_, Resolve, options, &server_);
    ASSERT_TRUE(s.ok()) << s.message();
  }

  // OpenStore(url), timed: every failure below must come at once, not after retries.
  Status Open(const std::string& url, std::unique_ptr<Store>* out, double* seconds) {
    const auto t0 = Clock::now();
    Status s = OpenStore(url, out);
    *seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    return s;
  }

  static std::string* dir_;
  KvStore store_;
  std::unique_ptr<KvServer> server_;
};
std::string* KvServerTlsTest::dir_ = nullptr;

TEST_F(KvServerTlsTest, RuntimeClientWorksOverTlsAndNothingCrossesInClear) {
  StartServer(true);
  Tap tap(PortOf(server_->address()));
  std::unique_ptr<Store> store;
  double seconds = 0;
  Status s = Open("hvds://127.0.0.1:" + std::to_string(tap.port()), &store, &seconds);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_NE(store->Describe().find("(TLS)"), std::string::npos) << store->Describe();
  const std::string value = "addr-of-rank-0=10.1.2.3:45678";
  ASSERT_TRUE(store->Set("job/t/host/0", value).ok());
  std::string got;
  ASSERT_TRUE(store->Get("job/t/host/0", &got).ok());
  EXPECT_EQ(got, value);
  // A parked WAIT ends when another connection writes its key.
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::unique_ptr<Store> other;
    ASSERT_TRUE(OpenStore("hvds://" + server_->address(), &other).ok());
    EXPECT_TRUE(other->Set("job/t/ready", "1").ok());
  });
  Status w = store->Wait({"job/t/ready"}, std::chrono::seconds(10));
  writer.join();
  EXPECT_TRUE(w.ok()) << w.message();
  int64_t n = 0;
  ASSERT_TRUE(store->Add("job/t/count", 5, &n).ok());
  EXPECT_EQ(n, 5);

  const std::string wire = tap.seen();
  EXPECT_GT(wire.size(), 200u);
  EXPECT_EQ(wire.find("tls-secret-7f3a"), std::string::npos) << "the job secret crossed in clear";
  EXPECT_EQ(wire.find("addr-of-rank-0"), std::string::npos) << "a value crossed in clear";
  EXPECT_EQ(wire.find("job/t/"), std::string::npos) << "a key crossed in clear";
  EXPECT_EQ(static_cast<unsigned char>(wire[0]), 22) << "not a TLS handshake record";
}

TEST_F(KvServerTlsTest, CaGivenAsPemTextWorks) {
  StartServer(true);
  setenv("HVD_RENDEZVOUS_CA", ReadFile(F("a/ca.crt")).c_str(), 1);
  std::unique_ptr<Store> store;
  double seconds = 0;
  Status s = Open("hvds://" + server_->address(), &store, &seconds);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_TRUE(store->Set("job/t/x", "1").ok());
}

TEST_F(KvServerTlsTest, CertificateOfAnotherCaFailsAtOnceSayingWhatToCheck) {
  StartServer(true);
  setenv("HVD_RENDEZVOUS_CA", F("b/ca.crt").c_str(), 1);
  std::unique_ptr<Store> store;
  double seconds = 0;
  Status s = Open("hvds://" + server_->address(), &store, &seconds);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.message();
  EXPECT_TRUE(Contains(s, "did not verify") && Contains(s, "HVD_RENDEZVOUS_CA=" + F("b/ca.crt")))
      << s.message();
  EXPECT_LT(seconds, 5.0) << "retried a certificate that cannot verify";
}

// The agent's --tls-crl reaches its ranks (HVD_RENDEZVOUS_CRL): a revoked launcher certificate is
// refused, a CRL that revokes nothing changes nothing, and a CRL of another CA is named.
TEST_F(KvServerTlsTest, RevokedLauncherCertificateIsRefused) {
  StartServer(true, "127.0.0.1:0", KvServerOptions(), "c");
  setenv("HVD_RENDEZVOUS_CA", F("c/ca.crt").c_str(), 1);
  std::unique_ptr<Store> store;
  double seconds = 0;
  ASSERT_TRUE(Open("hvds://" + server_->address(), &store, &seconds).ok());  // no CRL: no check
  setenv("HVD_RENDEZVOUS_CRL", ReadFile(F("c/ca.crl")).c_str(), 1);
  Status s = Open("hvds://" + server_->address(), &store, &seconds);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.message();
  EXPECT_TRUE(Contains(s, "revoked by HVD_RENDEZVOUS_CRL")) << s.message();
  EXPECT_LT(seconds, 5.0);
  setenv("HVD_RENDEZVOUS_CRL", ReadFile(F("a/ca.crl")).c_str(), 1);  // another CA's
  s = Open("hvds://" + server_->address(), &store, &seconds);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.message();
  EXPECT_TRUE(Contains(s, "does not fit the CA")) << s.message();
  setenv("HVD_RENDEZVOUS_CRL", "not a crl", 1);
  s = Open("hvds://" + server_->address(), &store, &seconds);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.message();

  server_->Stop();
  StartServer(true);  // CA a, which revoked nothing
  setenv("HVD_RENDEZVOUS_CA", F("a/ca.crt").c_str(), 1);
  setenv("HVD_RENDEZVOUS_CRL", ReadFile(F("a/ca.crl")).c_str(), 1);
  s = Open("hvds://" + server_->address(), &store, &seconds);
  EXPECT_TRUE(s.ok()) << s.message();
}

TEST_F(KvServerTlsTest, CertificateThatDoesNotNameTheHostFails) {
  // The certificate names 127.0.0.1 and localhost; the endpoint is dialed as 127.0.0.2.
  StartServer(true, "127.0.0.2:0");
  std::unique_ptr<Store> store;
  double seconds = 0;
  Status s = Open("hvds://" + server_->address(), &store, &seconds);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.message();
  EXPECT_TRUE(Contains(s, "did not verify") && Contains(s, "'127.0.0.2'")) << s.message();
  EXPECT_LT(seconds, 5.0);
}

TEST_F(KvServerTlsTest, PlainClientIsToldToDialHvds) {
  StartServer(true);
  std::unique_ptr<Store> store;
  double seconds = 0;
  Status s = Open("hvd://" + server_->address(), &store, &seconds);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.message();
  EXPECT_TRUE(Contains(s, "speaks TLS") && Contains(s, "hvds://")) << s.message();
  EXPECT_LT(seconds, 5.0);
  EXPECT_EQ(server_->stats().tls_failed, 1u);
}

TEST_F(KvServerTlsTest, TlsClientOfAPlainEndpointFailsAtOnce) {
  StartServer(false);
  std::unique_ptr<Store> store;
  double seconds = 0;
  Status s = Open("hvds://" + server_->address(), &store, &seconds);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.message();
  EXPECT_TRUE(Contains(s, "speak TLS") && Contains(s, "hvd://")) << s.message();
  EXPECT_LT(seconds, 5.0);
}

TEST_F(KvServerTlsTest, MissingOrEmptyCaIsNamed) {
  StartServer(true);
  std::unique_ptr<Store> store;
  double seconds = 0;
  unsetenv("HVD_RENDEZVOUS_CA");
  Status s = Open("hvds://" + server_->address(), &store, &seconds);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(s, "HVD_RENDEZVOUS_CA is not set")) << s.message();
  setenv("HVD_RENDEZVOUS_CA", "/nonexistent/ca.crt", 1);
  s = Open("hvds://" + server_->address(), &store, &seconds);
  EXPECT_TRUE(Contains(s, "/nonexistent/ca.crt")) << s.message();
  setenv("HVD_RENDEZVOUS_CA", F("a/127.0.0.1.key").c_str(), 1);  // a key, no certificate
  s = Open("hvds://" + server_->address(), &store, &seconds);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(s, "holds no PEM certificate")) << s.message();
}

// A connection closed during the handshake (a launcher restarting, or at its cap) is retried
// until the rendezvous timeout, as over plain TCP; OpenSSL 3 reports that EOF as a protocol
// error, which must not read as "does not speak TLS".
TEST_F(KvServerTlsTest, ConnectionClosedInTheHandshakeIsRetried) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(listen(fd, 16), 0);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  std::atomic<bool> stop{false};
  std::atomic<int> accepted{0};
  std::thread closer([&] {
    pollfd p{fd, POLLIN, 0};
    for (int i = 0; i < 400 && !stop; ++i) {
      if (poll(&p, 1, 10) == 1) {
        close(accept(fd, nullptr, nullptr));  // reads nothing: the ClientHello meets an EOF
        ++accepted;
      }
    }
  });
  setenv("HVD_RENDEZVOUS_TIMEOUT_SECONDS", "1", 1);
  std::unique_ptr<Store> store;
  double seconds = 0;
  Status s = Open("hvds://127.0.0.1:" + std::to_string(ntohs(a.sin_port)), &store, &seconds);
  stop = true;
  closer.join();
  close(fd);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.message();
  EXPECT_TRUE(Contains(s, "could not connect within")) << s.message();
  EXPECT_GE(seconds, 0.9);
  EXPECT_GT(accepted.load(), 1) << "not retried";
}

// At the connection cap a TLS rank is refused after its handshake, in words it can act on.
TEST_F(KvServerTlsTest, RefusalAtTheConnectionCapArrivesOverTls) {
  KvServerOptions options;
  options.max_connections = 1;
  StartServer(true, "127.0.0.1:0", options);
  std::unique_ptr<Store> first, second;
  double seconds = 0;
  ASSERT_TRUE(Open("hvds://" + server_->address(), &first, &seconds).ok());
  setenv("HVD_RENDEZVOUS_TIMEOUT_SECONDS", "1", 1);
  Status s = Open("hvds://" + server_->address(), &second, &seconds);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.message();
  EXPECT_TRUE(Contains(s, "connections open, its limit")) << s.message();
}

TEST_F(KvServerTlsTest, SilentConnectionIsClosedAtTheHelloDeadline) {
  KvServerOptions options;
  options.hello_timeout = std::chrono::milliseconds(300);
  StartServer(true, "127.0.0.1:0", options);
  kvtest::RawConn raw(server_->address());  // connects, never starts a handshake
  const auto t0 = Clock::now();
  EXPECT_TRUE(raw.Closed());
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(4));
  const auto end = Clock::now() + std::chrono::seconds(2);
  while (server_->stats().connections != 0 && Clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(server_->stats().connections, 0u);
}

}  // namespace
}  // namespace hvd::launcherd
