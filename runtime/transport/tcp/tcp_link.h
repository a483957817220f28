// TcpLink (one connected socket to one peer) and the TcpTransport built over a finished mesh.
// Private to transport/tcp; the public entry point is tcp::Connect in tcp_transport.h.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/thread_annotations.h"
#include "transport/transport.h"

namespace hvd::runtime::transport::tcp {

// Shared by a transport and its links so every operation sees Abort() at once.
class AbortState {
 public:
  AbortState();  // creates the eventfd
  ~AbortState();
  bool aborted() const { return aborted_.load(std::memory_order_acquire); }
  // Aborted(reason); only meaningful once aborted() is true.
  Status status() const;
  // Records `reason` (first call wins) and makes wake_fd() readable forever. False when already
  // aborted.
  bool Abort(const std::string& reason);
  // Readable once aborted: WaitReady polls it next to the sockets.
  int wake_fd() const { return wake_fd_; }

 private:
  std::atomic<bool> aborted_{false};
  mutable std::mutex mu_;
  std::string reason_ GUARDED_BY(mu_);
  int wake_fd_ = -1;
};

class TcpLink final : public Link {
 public:
  // Takes ownership of the connected, non-blocking `fd`. `address` is "host:port".
  TcpLink(int fd, int peer, const std::string& address, std::shared_ptr<AbortState> abort);
  ~TcpLink() override;

  int peer() const override { return peer_; }
  const std::string& description() const override { return description_; }
  Status TrySend(const void* data, size_t n, size_t* moved) override;
  Status TryRecv(void* data, size_t n, size_t* moved) override;

  int fd() const { return fd_; }

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

// Takes ownership of every peers[p].fd (p != rank).
std::unique_ptr<Transport> NewTcpTransport(int rank, int size, std::vector<PeerSocket> peers);

}  // namespace hvd::runtime::transport::tcp
