#include "transport/tcp/tcp_link.h"

#include <sys/socket.h>
#include <unistd.h>

#include "transport/tcp/socket_util.h"

namespace hvd::runtime::transport::tcp {

TcpLink::TcpLink(int fd, int peer, const std::string& address, std::shared_ptr<AbortState> abort)
    : fd_(fd),
      peer_(peer),
      description_("rank " + std::to_string(peer) + " (" + address + ")"),
      abort_(std::move(abort)) {}

TcpLink::~TcpLink() {
  close(fd_);
}

Status TcpLink::Failed(const char* op, int err) const {
  // Abort() shuts the sockets down, so an operation racing with it may see EOF or EPIPE: report
  // the abort, which is the cause.
  if (abort_->aborted()) return abort_->status();
  if (err == 0) {
    return Unavailable(description_ +
                       " closed the connection (the peer process exited or shut its transport "
                       "down)");
  }
  return Unavailable(std::string(op) + " " + description_ + ": " + ErrnoText(err));
}

Status TcpLink::TrySend(const void* data, size_t n, size_t* moved) {
  *moved = 0;
  if (abort_->aborted()) return abort_->status();
  if (n == 0) return Status::OK();
  for (;;) {
    // MSG_NOSIGNAL: a closed peer must give EPIPE here, never SIGPIPE to the process.
    ssize_t w = send(fd_, data, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w >= 0) {
      *moved = static_cast<size_t>(w);
      return Status::OK();
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return Status::OK();
    return Failed("send to", errno);
  }
}

Status TcpLink::TryRecv(void* data, size_t n, size_t* moved) {
  *moved = 0;
  if (abort_->aborted()) return abort_->status();
  if (n == 0) return Status::OK();
  for (;;) {
    ssize_t r = recv(fd_, data, n, MSG_DONTWAIT);
    if (r > 0) {
      *moved = static_cast<size_t>(r);
      return Status::OK();
    }
    if (r == 0) return Failed("recv from", 0);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return Status::OK();
    return Failed("recv from", errno);
  }
}

size_t TcpLink::Arm(bool send, bool recv, std::vector<pollfd>* fds) {
  const short events = static_cast<short>((send ? POLLOUT : 0) | (recv ? POLLIN : 0));
  if (events == 0) return 0;
  fds->push_back({fd_, events, 0});
  return 1;
}

void TcpLink::Shutdown() {
  shutdown(fd_, SHUT_RDWR);
}

}  // namespace hvd::runtime::transport::tcp
