// The REST endpoint answers a request without a body as one with: a POST, PUT, PATCH or DELETE
// on a known path with no Content-Length (as `curl -X POST URL` sends it) gets 405 with Allow,
// not a 400 "no such endpoint" from reading a body that never comes; an unknown path stays 404.
// Raw requests over a socket, since httplib's client always sends a body for these methods.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>

#include "launcher_test_util.h"
#include "testutil/expect.h"

namespace hvd::launcherd::testing {
namespace {

// Sends `request` to host:port and returns the server's response: until it closes the
// connection or a whole response (head and Content-Length body) is in, at most 5 s.
std::string RawHttp(const std::string& address, const std::string& request) {
  base::HostPort hp;
  EXPECT_TRUE(base::ParseHostPort(address, &hp).ok());
  const std::string& host = hp.host;
  const int port = hp.port;
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  EXPECT_GE(fd, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, host.c_str(), &sa.sin_addr);
  std::string out;
  if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0 &&
      send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
          static_cast<ssize_t>(request.size())) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    char buf[4096];
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd p{fd, POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      const ssize_t n = recv(fd, buf, sizeof buf, 0);
      if (n <= 0) break;
      out.append(buf, static_cast<size_t>(n));
      // One whole response (a server may keep the connection open for the next).
      const size_t head = out.find("\r\n\r\n");
      const size_t cl = out.find("Content-Length: ");
      if (head != std::string::npos && cl != std::string::npos && cl < head &&
          out.size() >= head + 4 + std::stoul(out.substr(cl + 16))) {
        break;
      }
    }
  }
  close(fd);
  return out;
}

TEST(RestBodyless, WritesWithoutABodyAre405OnKnownPaths) {
  auto launcher = StartLauncher();
  ASSERT_TRUE(launcher);
  for (const char* method : {"POST", "PUT", "PATCH", "DELETE"}) {
    for (const char* path : {"/v1/jobs", "/v1/jobs/abc", "/healthz"}) {
      SCOPED_TRACE(std::string(method) + " " + path);
      const std::string r = RawHttp(
          launcher->http_address(),
          std::string(method) + " " + path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
      EXPECT_EQ(r.rfind("HTTP/1.1 405", 0), 0u) << r;
      EXPECT_HAS(r, "Allow: GET, HEAD, OPTIONS\r\n");
      EXPECT_HAS(r, "read-only");
      EXPECT_EQ(r.find("no such endpoint"), std::string::npos) << r;
    }
  }
  const std::string r =
      RawHttp(launcher->http_address(),
              "POST /v1/nothing HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 404", 0), 0u) << r;
  EXPECT_HAS(r, "no such endpoint: POST /v1/nothing");
}

// Only a 404 says "no such endpoint": a request the server cannot take on a known path says
// what is wrong with it.
TEST(RestBodyless, OtherErrorsDoNotClaimTheEndpointIsMissing) {
  auto launcher = StartLauncher();
  ASSERT_TRUE(launcher);
  const std::string r =
      RawHttp(launcher->http_address(), "GET /v1/jobs?state=" + std::string(9000, 'a') +
                                            " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  ASSERT_EQ(r.rfind("HTTP/1.1 4", 0), 0u) << r.substr(0, 200);
  EXPECT_EQ(r.rfind("HTTP/1.1 404", 0), std::string::npos) << r.substr(0, 200);
  EXPECT_EQ(r.find("no such endpoint"), std::string::npos) << r.substr(0, 400);
}

}  // namespace
}  // namespace hvd::launcherd::testing
