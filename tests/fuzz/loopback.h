// For the fuzz targets that drive a real server (kv_server_fuzz, rest_fuzz): one connection on
// 127.0.0.1 that sends the input, closes its sending side (so the server sees the end of the
// request stream, as from a client that hung up) and reads whatever comes back until the server
// closes. A server that neither answers nor closes within the deadline is a hang: the caller
// reports it as a crash.
#pragma once

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "base/net.h"
#include "fuzz_util.h"

namespace hvd::fuzz {

struct Exchange {
  bool connected = false;
  bool closed = false;  // the server closed the connection before the deadline
  std::string received;
};

inline Exchange SendAndDrain(const std::string& address, std::string_view input,
                             std::chrono::milliseconds deadline) {
  Exchange ex;
  base::HostPort hp;
  HVD_FUZZ_CHECK(base::ParseHostPort(address, &hp).ok(), "bad address " + address);
  const std::string& host = hp.host;
  const int port = hp.port;
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  HVD_FUZZ_CHECK(fd >= 0, "socket()");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, host.c_str(), &a.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return ex;
  }
  ex.connected = true;
  const auto end = std::chrono::steady_clock::now() + deadline;
  auto left_ms = [&] {
    return static_cast<int>(std::max<int64_t>(
        0, std::chrono::duration_cast<std::chrono::milliseconds>(
               end - std::chrono::steady_clock::now())
               .count()));
  };
  // Write and read together: a server may answer (and stop reading) before the input is sent.
  size_t sent = 0;
  bool shut = false;
  for (;;) {
    if (!shut && sent == input.size()) {
      shutdown(fd, SHUT_WR);
      shut = true;
    }
    pollfd p{fd, static_cast<short>(POLLIN | (shut ? 0 : POLLOUT)), 0};
    const int ms = left_ms();
    if (ms == 0) break;
    const int ready = poll(&p, 1, ms);
    // libFuzzer's -timeout watchdog is a SIGALRM every few seconds: an interrupted poll goes on.
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) break;
    if (p.revents & POLLIN || p.revents & (POLLHUP | POLLERR)) {
      char buf[4096];
      const ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
        ex.closed = true;
        break;
      }
      if (n > 0) ex.received.append(buf, static_cast<size_t>(n));
    }
    if (!shut && (p.revents & POLLOUT)) {
      const ssize_t w = send(fd, input.data() + sent, input.size() - sent,
                             MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w > 0) {
        sent += static_cast<size_t>(w);
      } else if (w < 0 && errno != EAGAIN && errno != EINTR) {
        shutdown(fd, SHUT_WR);  // the server closed its side: read what it said
        shut = true;
      }
    }
  }
  close(fd);
  return ex;
}

}  // namespace hvd::fuzz
