#include "transport/shm/handshake.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

namespace hvd::runtime::transport::shm {
namespace {

union FdControl {
  cmsghdr header;
  char bytes[CMSG_SPACE(2 * sizeof(int))];
};

}  // namespace

Hello MakeHello(int rank, int size, const std::string& scope, int local_size, size_t ring_bytes) {
  Hello h = transport::MakeHello(kShmMagic, rank, size, scope);
  h.ring_bytes = ring_bytes;
  h.local_size = local_size;
  return h;
}

Status SendHello(int fd, const Hello& h, int segment_fd, int doorbell_fd, Deadline deadline,
                 const std::string& what) {
  Hello copy = h;
  iovec iov{&copy, sizeof(copy)};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  FdControl control{};
  if (segment_fd >= 0) {
    msg.msg_control = control.bytes;
    msg.msg_controllen = sizeof(control.bytes);
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(2 * sizeof(int));
    const int fds[2] = {segment_fd, doorbell_fd};
    std::memcpy(CMSG_DATA(c), fds, sizeof(fds));
  }
  for (;;) {
    ssize_t w = sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (w == static_cast<ssize_t>(sizeof(copy))) return Status::OK();
    if (w >= 0) return Internal("sendmsg to " + what + ": short write of the shm hello");
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      return Unavailable("sendmsg to " + what + ": " + ErrnoText(errno));
    }
    HVD_RETURN_IF_ERROR_CTX(WaitFd(fd, POLLOUT, deadline, -1), "sendmsg to " + what);
  }
}

Status RecvHello(int fd, Hello* h, int* segment_fd, int* doorbell_fd, Deadline deadline,
                 const std::string& what) {
  *segment_fd = *doorbell_fd = -1;
  iovec iov{h, sizeof(*h)};
  FdControl control{};
  msghdr msg{};
  ssize_t r = 0;
  for (;;) {
    msg = {};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.bytes;
    msg.msg_controllen = sizeof(control.bytes);
    r = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
    if (r > 0) break;
    if (r == 0) return Unavailable(what + " closed the connection during the shm handshake");
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      return Unavailable("recvmsg from " + what + ": " + ErrnoText(errno));
    }
    HVD_RETURN_IF_ERROR_CTX(WaitFd(fd, POLLIN, deadline, -1), "recvmsg from " + what);
  }
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    int fds[2] = {-1, -1};
    std::memcpy(fds, CMSG_DATA(c), std::min<size_t>(n, 2) * sizeof(int));
    if (n == 2) {
      *segment_fd = fds[0];
      *doorbell_fd = fds[1];
    } else {
      for (size_t i = 0; i < std::min<size_t>(n, 2); ++i) close(fds[i]);
    }
  }
  if ((msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0 || r != static_cast<ssize_t>(sizeof(*h))) {
    if (*segment_fd >= 0) close(*segment_fd);
    if (*doorbell_fd >= 0) close(*doorbell_fd);
    *segment_fd = *doorbell_fd = -1;
    return FailedPrecondition(what + " sent a malformed shm hello");
  }
  return Status::OK();
}

}  // namespace hvd::runtime::transport::shm
