// TcpLink: one connected socket to one peer. Private to transport/tcp; the public entry point is
// tcp::Connect in tcp_transport.h.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "transport/link_transport.h"

namespace hvd::runtime::transport::tcp {

class TcpLink final : public PollableLink {
 public:
  // Takes ownership of the connected, non-blocking `fd`. `address` is "host:port".
  TcpLink(int fd, int peer, const std::string& address, std::shared_ptr<AbortState> abort);
  ~TcpLink() override;

  int peer() const override { return peer_; }
  const std::string& description() const override { return description_; }
  Status TrySend(const void* data, size_t n, size_t* moved) override;
  Status TryRecv(void* data, size_t n, size_t* moved) override;

  // POLLERR/POLLHUP are always reported, so a broken link wakes the caller, whose next
  // TrySend/TryRecv returns the error.
  size_t Arm(bool send, bool recv, std::vector<pollfd>* fds) override;
  // shutdown (not close) keeps the fd valid for a thread still using it.
  void Shutdown() override;

 private:
  // The error for `op` ("send to", "recv from") failing with errno `err` (0: EOF).
  Status Failed(const char* op, int err) const;

  const int fd_;
  const int peer_;
  const std::string description_;
  const std::shared_ptr<AbortState> abort_;
};

struct PeerSocket {
  int fd = -1;
  std::string address;  // "host:port" the peer listens on
};

}  // namespace hvd::runtime::transport::tcp
