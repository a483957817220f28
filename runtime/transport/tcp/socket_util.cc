#include "transport/tcp/socket_util.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <climits>
#include <cstring>

#include "base/net.h"

namespace hvd::runtime::transport::tcp {

Status SetStreamOptions(int fd, int buffer_bytes) {
  int one = 1;
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0) {
    return Unavailable("setsockopt(TCP_NODELAY): " + ErrnoText(errno));
  }
  if (buffer_bytes > 0) {
    for (int opt : {SO_SNDBUF, SO_RCVBUF}) {
      if (setsockopt(fd, SOL_SOCKET, opt, &buffer_bytes, sizeof(buffer_bytes)) != 0) {
        return Unavailable(std::string("setsockopt(") +
                           (opt == SO_SNDBUF ? "SO_SNDBUF" : "SO_RCVBUF") + ", " +
                           std::to_string(buffer_bytes) + "): " + ErrnoText(errno));
      }
    }
  }
  return Status::OK();
}

std::string IpText(const sockaddr_in& addr) {
  char buf[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &addr.sin_addr, buf, sizeof(buf));
  return buf;
}

Status Listen(const std::string& host, int port, int buffer_bytes, int backlog, int* fd,
              int* bound_port) {
  sockaddr_in addr;
  // Unavailable, as before base/ took over resolution: this rank cannot open its endpoint.
  if (Status r = base::ResolveIPv4(host, port, &addr); !r.ok()) return Unavailable(r.message());
  std::string where = host + ":" + std::to_string(port);
  int s = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (s < 0) return Unavailable("socket: " + ErrnoText(errno));
  int one = 1;
  Status st;
  // Buffer sizes are set on the listener so accepted sockets inherit them before the handshake
  // (the receive window scale is fixed at SYN time).
  if (setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0) {
    st = Unavailable("setsockopt(SO_REUSEADDR): " + ErrnoText(errno));
  } else if (st = SetStreamOptions(s, buffer_bytes); !st.ok()) {
  } else if (bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    st = Unavailable("bind " + where + ": " + ErrnoText(errno));
  } else if (listen(s, backlog) != 0) {
    st = Unavailable("listen " + where + ": " + ErrnoText(errno));
  } else {
    socklen_t len = sizeof(addr);
    if (getsockname(s, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      st = Unavailable("getsockname " + where + ": " + ErrnoText(errno));
    }
  }
  if (!st.ok()) {
    close(s);
    return st;
  }
  *fd = s;
  *bound_port = ntohs(addr.sin_port);
  return Status::OK();
}

Status ConnectOnce(const sockaddr_in& addr, const std::string& what, int buffer_bytes,
                   Deadline deadline, int cancel_fd, int* fd) {
  int s = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (s < 0) return Unavailable("socket: " + ErrnoText(errno));
  Status st = SetStreamOptions(s, buffer_bytes);
  if (st.ok() && connect(s, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    if (errno != EINPROGRESS) {
      st = Unavailable("connect " + what + ": " + ErrnoText(errno));
    } else if (st = WaitFd(s, POLLOUT, deadline, cancel_fd); st.ok()) {
      int err = 0;
      socklen_t len = sizeof(err);
      if (getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
      if (err != 0) st = Unavailable("connect " + what + ": " + ErrnoText(err));
    } else {
      st = st.WithContext("connect " + what);
    }
  }
  if (!st.ok()) {
    close(s);
    return st;
  }
  *fd = s;
  return Status::OK();
}

}  // namespace hvd::runtime::transport::tcp
