#include "transport/tcp/tcp_link.h"

#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>

#include "transport/tcp/socket_util.h"

namespace hvd::runtime::transport::tcp {

AbortState::AbortState() : wake_fd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}

AbortState::~AbortState() {
  if (wake_fd_ >= 0) close(wake_fd_);
}

Status AbortState::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return Aborted(reason_);
}

bool AbortState::Abort(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (aborted_.load(std::memory_order_relaxed)) return false;
    reason_ = reason.empty() ? "transport aborted" : reason;
    aborted_.store(true, std::memory_order_release);
  }
  // Never read back: the counter stays nonzero, so every later poll returns at once too.
  uint64_t one = 1;
  if (wake_fd_ >= 0) (void)!write(wake_fd_, &one, sizeof(one));
  return true;
}

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

}  // namespace hvd::runtime::transport::tcp
