// TcpTransport: the links of a finished mesh plus WaitReady (poll(2) over the sockets and the
// abort eventfd) and Abort.
#include <poll.h>
#include <sys/socket.h>

#include <climits>

#include "transport/tcp/socket_util.h"
#include "transport/tcp/tcp_link.h"

namespace hvd::runtime::transport::tcp {
namespace {

class TcpTransport final : public Transport {
 public:
  TcpTransport(int rank, int size, std::vector<PeerSocket> peers)
      : rank_(rank), size_(size), abort_(std::make_shared<AbortState>()), links_(size) {
    for (int p = 0; p < size; ++p) {
      if (p == rank) continue;
      links_[p] = std::make_unique<TcpLink>(peers[p].fd, p, peers[p].address, abort_);
    }
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Link* link(int peer) override { return links_[peer].get(); }

  Status WaitReady(const std::vector<WaitItem>& items, Clock::time_point deadline) override {
    if (abort_->aborted()) return abort_->status();
    // The common case (a ring step: one send and one recv link) stays off the heap.
    constexpr size_t kInline = 8;
    pollfd inline_fds[kInline + 1];
    std::vector<pollfd> heap_fds;
    pollfd* fds = inline_fds;
    if (items.size() > kInline) {
      heap_fds.resize(items.size() + 1);
      fds = heap_fds.data();
    }
    for (size_t i = 0; i < items.size(); ++i) {
      const WaitItem& it = items[i];
      short events = static_cast<short>((it.send ? POLLOUT : 0) | (it.recv ? POLLIN : 0));
      // A negative fd makes poll skip the entry. POLLERR/POLLHUP are always reported, so a broken
      // link wakes the caller, whose next TrySend/TryRecv returns the error.
      fds[i] = {it.link != nullptr && events != 0 ? static_cast<TcpLink*>(it.link)->fd() : -1,
                events, 0};
    }
    const nfds_t n = items.size() + 1;
    fds[items.size()] = {abort_->wake_fd(), POLLIN, 0};
    for (;;) {
      auto now = Clock::now();
      auto left =
          deadline > now ? std::chrono::ceil<std::chrono::milliseconds>(deadline - now).count() : 0;
      int r = poll(fds, n, static_cast<int>(std::min<int64_t>(left, INT_MAX)));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) return Internal("WaitReady: poll: " + ErrnoText(errno));
      if (abort_->aborted()) return abort_->status();
      if (r > 0) return Status::OK();
      if (Clock::now() >= deadline) return TimedOut(items);
    }
  }

  void Abort(const std::string& reason) override {
    if (!abort_->Abort(reason)) return;
    // Peers blocked on this rank see the connection close at once instead of waiting out their
    // own timeouts; shutdown (not close) keeps the fds valid for threads still using them.
    for (auto& l : links_) {
      if (l != nullptr) shutdown(l->fd(), SHUT_RDWR);
    }
  }

 private:
  static Status TimedOut(const std::vector<WaitItem>& items) {
    std::string m = "WaitReady: deadline passed waiting on";
    const char* sep = " ";
    for (const WaitItem& it : items) {
      if (it.link == nullptr) continue;
      m += sep;
      m += it.send && it.recv ? "send/recv " : it.send ? "send to " : "recv from ";
      m += it.link->description();
      sep = ", ";
    }
    if (*sep == ' ') m += " nothing";
    return DeadlineExceeded(std::move(m));
  }

  const int rank_;
  const int size_;
  const std::shared_ptr<AbortState> abort_;
  std::vector<std::unique_ptr<TcpLink>> links_;
};

}  // namespace

std::unique_ptr<Transport> NewTcpTransport(int rank, int size, std::vector<PeerSocket> peers) {
  return std::make_unique<TcpTransport>(rank, size, std::move(peers));
}

}  // namespace hvd::runtime::transport::tcp
