// The launcher's REST endpoint under abuse (issue 20, finding 5), on a real Launcher: slow-header
// and idle connections do not take /healthz away, a 256 MiB POST is refused before its body is
// read (no memory grows), and /v1/* needs a bearer token unless the launcher is started public.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "launcher_test_util.h"
#include "testutil/expect.h"
#include "testutil/http_get.h"

namespace hvd::launcherd::testing {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

int PortOf(const Launcher& l) {
  base::HostPort http;
  EXPECT_TRUE(base::ParseHostPort(l.http_address(), &http).ok());
  return http.port;
}

int Connect(int port) {
  const int fd = hvd::testing::ConnectLoopback(port);
  EXPECT_GE(fd, 0) << std::strerror(errno);
  return fd;
}

// The answer's head (up to the blank line) from `fd`; "" when none comes within 3 s.
std::string AnswerHead(int fd) {
  std::string out;
  char c;
  while (out.find("\r\n\r\n") == std::string::npos && recv(fd, &c, 1, 0) == 1) out += c;
  return out;
}

int64_t RssKb() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6));
  }
  return -1;
}

// Enough descriptors for 500 idle clients and the server's side of what the cap keeps.
void RaiseFdLimit() {
  rlimit r{};
  getrlimit(RLIMIT_NOFILE, &r);
  r.rlim_cur = std::min<rlim_t>(r.rlim_max, 4096);
  setrlimit(RLIMIT_NOFILE, &r);
}

TEST(RestHardening, SlowHeadersAndIdleConnectionsDoNotBlockHealthz) {
  RaiseFdLimit();
  auto launcher = StartLauncher();
  ASSERT_TRUE(launcher);
  const int port = PortOf(*launcher);
  // 8 slowloris connections (a header byte every 100 ms) and 500 that never send anything.
  std::vector<int> slow, idle;
  for (int i = 0; i < 8; ++i) {
    slow.push_back(Connect(port));
    send(slow.back(), "GET /healthz HTTP/1.1\r\nX-Slow: ", 31, MSG_NOSIGNAL);
  }
  for (int i = 0; i < 500; ++i) idle.push_back(Connect(port));
  std::atomic<bool> done{false};
  std::thread drip([&] {
    while (!done) {
      for (int fd : slow) send(fd, "a", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
      std::this_thread::sleep_for(100ms);
    }
  });
  // Meanwhile every probe is answered at once, on new connections as a kubelet's are.
  auto http = Http(*launcher);
  const auto start = Clock::now();
  for (int i = 0; i < 10; ++i) {
    for (const char* path : {"/healthz", "/metrics", "/v1/jobs"}) {
      const auto t0 = Clock::now();
      auto res = http.Get(path);
      ASSERT_TRUE(res) << path << " not answered: " << httplib::to_string(res.error());
      EXPECT_EQ(res->status, 200) << path;
      EXPECT_LT(Clock::now() - t0, 1s) << path;
    }
  }
  EXPECT_LT(Clock::now() - start, 5s);
  done = true;
  drip.join();
  for (int fd : slow) close(fd);
  for (int fd : idle) close(fd);
}

TEST(RestHardening, A256MiBPostIsRefusedBeforeItsBodyIsRead) {
  auto launcher = StartLauncher();
  ASSERT_TRUE(launcher);
  const int64_t rss_before = RssKb();
  const int fd = Connect(PortOf(*launcher));
  const std::string head =
      std::string("POST /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ") + kToken +
      "\r\nContent-Length: 268435456\r\n\r\n";
  ASSERT_EQ(send(fd, head.data(), head.size(), MSG_NOSIGNAL), static_cast<ssize_t>(head.size()));
  // The answer comes before a byte of the body is sent.
  const std::string answer = AnswerHead(fd);
  EXPECT_HAS(answer, "HTTP/1.1 413");
  // The server has closed: sending the body fails long before 256 MiB.
  std::string chunk(64 * 1024, 'x');
  size_t sent = 0;
  while (sent < (256u << 20)) {
    ssize_t n = send(fd, chunk.data(), chunk.size(), MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  close(fd);
  EXPECT_LT(sent, 64u << 20) << "the server kept reading the body";
  EXPECT_LT(RssKb() - rss_before, 16 * 1024) << "RSS grew (kB)";
  // And the endpoint is still there.
  auto res = Http(*launcher).Get("/healthz");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
}

TEST(RestHardening, JobDetailsNeedTheTokenAndSayHowToAuthenticate) {
  LauncherOptions o;
  o.rest_token = "rest-only-token-abcdef0123456789";
  auto launcher = StartLauncher(o);
  ASSERT_TRUE(launcher);
  auto bare = Http(*launcher, "");
  for (const char* path : {"/healthz", "/metrics"}) {
    auto res = bare.Get(path);
    ASSERT_TRUE(res) << path;
    EXPECT_EQ(res->status, 200) << path << " must stay open (probes, Prometheus)";
  }
  for (const char* path : {"/v1/jobs", "/v1/jobs/some-job", "/v1/agents", "/v1/nothing"}) {
    auto res = bare.Get(path);
    ASSERT_TRUE(res) << path;
    EXPECT_EQ(res->status, 401) << path;
    EXPECT_EQ(res->get_header_value("WWW-Authenticate"), "Bearer realm=\"hvd-launcherd\"");
    const std::string error = json::parse(res->body).at("error");
    EXPECT_HAS(error, "Authorization: Bearer");
    EXPECT_HAS(error, "--token-file");
    EXPECT_HAS(error, "--rest-public");
  }
  // The cluster token and the REST token both open /v1/; another token does not, and each
  // wrong one is logged with the peer's address, once per peer and interval, escaped.
  EXPECT_EQ(Http(*launcher, kToken).Get("/v1/jobs")->status, 200);
  EXPECT_EQ(Http(*launcher, o.rest_token).Get("/v1/agents")->status, 200);
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < 20; ++i) {
    auto res = Http(*launcher, "wrong-token").Get("/v1/jobs%0Aforged-line");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 401);
    EXPECT_HAS(json::parse(res->body).at("error").get<std::string>(), "neither the cluster token");
  }
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_HAS(err, "REST: wrong bearer token from 127.0.0.1:");
  EXPECT_HAS(err, "/v1/jobs\\nforged-line");
  EXPECT_EQ(err.find("\nforged-line"), std::string::npos) << err;
  size_t lines = 0;
  for (size_t p = 0; (p = err.find("wrong bearer token", p)) != std::string::npos; ++p) ++lines;
  EXPECT_EQ(lines, 1u) << err;
}

TEST(RestHardening, RestPublicServesJobDetailsWithoutAToken) {
  LauncherOptions o;
  o.rest_public = true;
  auto launcher = StartLauncher(o);
  ASSERT_TRUE(launcher);
  auto res = Http(*launcher, "").Get("/v1/jobs");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(json::parse(res->body), json::parse(R"({"jobs": []})"));
}

TEST(RestHardening, KeepAliveClientsAreServedAgainOnTheirConnection) {
  auto launcher = StartLauncher();
  ASSERT_TRUE(launcher);
  auto http = Http(*launcher);
  http.set_keep_alive(true);
  for (int i = 0; i < 5; ++i) {
    auto res = http.Get(i % 2 ? "/healthz" : "/v1/jobs");
    ASSERT_TRUE(res) << i;
    EXPECT_EQ(res->status, 200) << i;
  }
  auto res = http.Head("/v1/agents");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_TRUE(res->body.empty());
}

}  // namespace
}  // namespace hvd::launcherd::testing
