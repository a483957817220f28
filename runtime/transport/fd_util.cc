#include "transport/fd_util.h"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <climits>
#include <cstring>

namespace hvd::runtime::transport {

Status WaitFd(int fd, short events, Deadline deadline, int cancel_fd) {
  for (;;) {
    auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return DeadlineExceeded("timed out");
    auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - now).count();
    pollfd fds[2] = {{fd, events, 0}, {cancel_fd, POLLIN, 0}};
    int r = poll(fds, cancel_fd >= 0 ? 2 : 1, static_cast<int>(std::min<int64_t>(left, INT_MAX)));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return Internal("poll: " + ErrnoText(errno));
    if (cancel_fd >= 0 && fds[1].revents != 0) return Status(StatusCode::kCancelled, "cancelled");
    if (fds[0].revents != 0) return Status::OK();
  }
}

Status WriteFull(int fd, const void* data, size_t n, Deadline deadline, int cancel_fd,
                 const std::string& what) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w > 0) {
      p += w;
      n -= static_cast<size_t>(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
      return Unavailable("send to " + what + ": " + ErrnoText(errno));
    }
    HVD_RETURN_IF_ERROR_CTX(WaitFd(fd, POLLOUT, deadline, cancel_fd), "send to " + what);
  }
  return Status::OK();
}

Status ReadFull(int fd, void* data, size_t n, Deadline deadline, int cancel_fd,
                const std::string& what) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    ssize_t r = recv(fd, p, n, 0);
    if (r > 0) {
      p += r;
      n -= static_cast<size_t>(r);
      continue;
    }
    if (r == 0) return Unavailable(what + " closed the connection during the handshake");
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      return Unavailable("recv from " + what + ": " + ErrnoText(errno));
    }
    HVD_RETURN_IF_ERROR_CTX(WaitFd(fd, POLLIN, deadline, cancel_fd), "recv from " + what);
  }
  return Status::OK();
}

uint64_t ScopeHash(const std::string& scope) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : scope) h = (h ^ c) * 1099511628211ull;
  return h;
}

}  // namespace hvd::runtime::transport
