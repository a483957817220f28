#include "testutil/http_get.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace hvd::testing {
namespace {

// Bounds every send and receive on `fd` to `seconds`.
void SetTimeouts(int fd, int seconds) {
  timeval tv{seconds, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

}  // namespace

int ConnectLoopback(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  SetTimeouts(fd, 3);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    const int err = errno;
    close(fd);
    errno = err;
    return -1;
  }
  return fd;
}

HttpAnswer HttpGet(int fd, const std::string& ip, int port, const std::string& path,
                   const std::string& token) {
  HttpAnswer a;
  if (fd < 0) fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    a.error = std::string("socket: ") + std::strerror(errno);
    return a;
  }
  SetTimeouts(fd, 5);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const std::string where = ip + ":" + std::to_string(port);
  if (inet_pton(AF_INET, ip.c_str(), &addr.sin_addr) != 1) {
    a.error = "not an IPv4 address: " + ip;
    close(fd);
    return a;
  }
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    a.error = "connect " + where + ": " + std::strerror(errno);
    close(fd);
    return a;
  }
  const std::string auth = token.empty() ? "" : "Authorization: Bearer " + token + "\r\n";
  const std::string req =
      "GET " + path + " HTTP/1.0\r\nHost: " + ip + "\r\n" + auth + "Connection: close\r\n\r\n";
  if (send(fd, req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size())) {
    a.error = std::string("send: ") + std::strerror(errno);
    close(fd);
    return a;
  }
  std::string resp;
  char buf[8192];
  while (true) {
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      a.error = std::string("recv: ") + std::strerror(errno);
      close(fd);
      return a;
    }
    resp.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  const size_t head_end = resp.find("\r\n\r\n");
  if (resp.rfind("HTTP/1.", 0) != 0 || head_end == std::string::npos) {
    a.error = "malformed HTTP answer from " + where + ": " + resp.substr(0, 200);
    return a;
  }
  a.status = std::atoi(resp.c_str() + resp.find(' ') + 1);
  a.body = resp.substr(head_end + 4);
  return a;
}

}  // namespace hvd::testing
