#include "agent/probe_dial.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/net.h"

namespace hvd::agent {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kMaxGreeting = 256;

struct Dial {
  int fd = -1;
  bool connected = false;
  bool done = false;
  std::string got;
  Clock::time_point start;
};

// What the greeting says about whom we reached.
std::string CheckGreeting(const std::string& line, const std::string& probe_id,
                          const std::string& expect) {
  const std::string want = ProbeGreeting(probe_id, expect);
  if (line + "\n" == want) return "";
  if (line.rfind("HVDPROBE1 " + probe_id + " ", 0) == 0) {
    return "answered by agent " + line.substr(11 + probe_id.size()) + ", not " + expect +
           " (the address leads to another host)";
  }
  if (line.rfind("HVDPROBE1 ", 0) == 0) return "answered by another probe's listener";
  return "something else answers there, not an hvd-agent probe";
}

}  // namespace

std::string ProbeGreeting(const std::string& probe_id, const std::string& agent_id) {
  return "HVDPROBE1 " + probe_id + " " + agent_id + "\n";
}

std::vector<ProbeDialResult> DialAll(const std::vector<ProbeDialTarget>& targets,
                                     const std::string& probe_id,
                                     std::chrono::milliseconds timeout) {
  std::vector<ProbeDialResult> results(targets.size());
  std::vector<Dial> dials(targets.size());
  const auto deadline = Clock::now() + timeout;
  auto finish = [&](size_t i, bool ok, std::string error) {
    results[i].ok = ok;
    results[i].error = std::move(error);
    results[i].micros =
        std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - dials[i].start)
            .count();
    if (dials[i].fd >= 0) close(dials[i].fd);
    dials[i].fd = -1;
    dials[i].done = true;
  };
  for (size_t i = 0; i < targets.size(); ++i) {
    dials[i].start = Clock::now();
    sockaddr_in addr;
    Status s = base::ResolveIPv4(targets[i].address, targets[i].port, &addr);
    if (!s.ok()) {
      finish(i, false, s.message());
      continue;
    }
    dials[i].fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (dials[i].fd < 0) {
      finish(i, false, std::string("socket: ") + std::strerror(errno));
      continue;
    }
    if (connect(dials[i].fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 &&
        errno != EINPROGRESS) {
      finish(i, false, std::string("connect: ") + std::strerror(errno));
      continue;
    }
  }
  while (true) {
    std::vector<pollfd> fds;
    std::vector<size_t> index;
    for (size_t i = 0; i < dials.size(); ++i) {
      if (dials[i].done) continue;
      fds.push_back({dials[i].fd, static_cast<short>(dials[i].connected ? POLLIN : POLLOUT), 0});
      index.push_back(i);
    }
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (fds.empty() || left <= 0) break;
    if (poll(fds.data(), fds.size(), static_cast<int>(left)) < 0 && errno != EINTR) break;
    for (size_t k = 0; k < fds.size(); ++k) {
      if (fds[k].revents == 0) continue;
      const size_t i = index[k];
      Dial& d = dials[i];
      if (!d.connected) {
        int err = 0;
        socklen_t len = sizeof err;
        getsockopt(d.fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err != 0) {
          finish(i, false, std::string("connect: ") + std::strerror(err));
        } else {
          d.connected = true;
        }
        continue;
      }
      char buf[kMaxGreeting];
      const ssize_t n = recv(d.fd, buf, sizeof buf, 0);
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (n <= 0) {
        finish(i, false,
               n == 0 ? "connected, but the peer closed without a greeting (not an hvd-agent "
                        "probe listener)"
                      : std::string("recv: ") + std::strerror(errno));
        continue;
      }
      d.got.append(buf, static_cast<size_t>(n));
      const size_t nl = d.got.find('\n');
      if (nl != std::string::npos) {
        const std::string wrong =
            CheckGreeting(d.got.substr(0, nl), probe_id, targets[i].expect_agent);
        finish(i, wrong.empty(), wrong);
      } else if (d.got.size() >= kMaxGreeting) {
        finish(i, false, "something else answers there, not an hvd-agent probe");
      }
    }
  }
  const std::string ms = std::to_string(timeout.count());
  for (size_t i = 0; i < dials.size(); ++i) {
    if (dials[i].done) continue;
    finish(i, false,
           dials[i].connected ? "connected, but no greeting within " + ms + " ms"
                              : "no answer within " + ms +
                                    " ms: packets dropped on the way, by a route or a firewall");
  }
  return results;
}

Status OpenProbeListener(int* fd, int* port) {
  *fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (*fd < 0) return Unavailable(std::string("probe listener: socket: ") + std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof addr;
  if (bind(*fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || listen(*fd, 64) != 0 ||
      getsockname(*fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const int err = errno;
    close(*fd);
    *fd = -1;
    return Unavailable(std::string("probe listener on 0.0.0.0: ") + std::strerror(err));
  }
  *port = ntohs(addr.sin_port);
  return Status::OK();
}

void ServeProbe(int listen_fd, int stop_fd, const std::string& greeting,
                Clock::time_point deadline) {
  while (true) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return;
    pollfd fds[2] = {{listen_fd, POLLIN, 0}, {stop_fd, POLLIN, 0}};
    if (poll(fds, 2, static_cast<int>(left)) < 0 && errno != EINTR) return;
    if (fds[1].revents != 0) return;
    if (fds[0].revents == 0) continue;
    const int c = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (c < 0) continue;  // the caller gave up, or a transient error: keep serving
    // A few dozen bytes always fit an empty socket buffer: never blocks.
    (void)!send(c, greeting.data(), greeting.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    close(c);
  }
}

}  // namespace hvd::agent
