// What stands between the REST port and cpp-httplib's request handling, so that slow or idle
// clients cannot take the endpoint away from /healthz, Prometheus and operators.
//
// httplib gives every connection a pool thread for its whole life, waiting on each recv up to the
// read timeout: 8 slow-header ("slowloris") connections, or a few hundred idle ones, occupy every
// thread and nothing else is answered. The gate instead holds every connection in one epoll
// thread, costing a socket and no thread, until the kernel has buffered its whole request head
// (request line and headers, read with MSG_PEEK); only then does a worker thread serve it, and
// that serving cannot block on the client. Limits, each a refusal logged per peer (rate limited):
//   - a request head must complete within head_timeout of the connection's first byte, and be at
//     most max_head_bytes (431 past it);
//   - a body (REST is read-only) must announce a Content-Length of at most max_body_bytes (413
//     past it, 411 for chunked bodies), answered before a byte of it is read;
//   - a connection with no request for idle_timeout (new, or between keep-alive requests) is
//     closed;
//   - at max_connections open connections, a new one closes the oldest that is still waiting for
//     its head (the one least likely to be a prober's), so new connections always get in.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "hvd/status.h"

namespace hvd::launcherd {

struct HttpLimits {
  size_t max_connections = 256;
  size_t max_head_bytes = 16 * 1024;
  uint64_t max_body_bytes = 64 * 1024;
  std::chrono::milliseconds idle_timeout{5000};
  std::chrono::milliseconds head_timeout{5000};
  // Time a worker may spend reading a body or writing one response to a client that does not read.
  std::chrono::milliseconds io_timeout{5000};
  int workers = 4;
};

// A request whose head is complete in the socket's receive buffer.
struct GatedRequest {
  int fd = -1;
  std::string peer;         // "ip:port", for logs
  size_t head_bytes = 0;    // request line and headers, the blank line included
  uint64_t body_bytes = 0;  // its Content-Length (at most max_body_bytes)
};

class HttpGate {
 public:
  // Serves `r` on a worker thread: reads exactly head_bytes + body_bytes from r.fd, writes the
  // answer. Returns whether the connection may carry another request (keep-alive).
  using Serve = std::function<bool(const GatedRequest& r)>;

  static Status Start(const HttpLimits& limits, Serve serve, std::unique_ptr<HttpGate>* out);
  virtual ~HttpGate() = default;

  // Takes `fd`, a freshly accepted connection. Never blocks on the client.
  virtual void Admit(int fd) = 0;
  // Closes every connection and joins the threads. Idempotent.
  virtual void Stop() = 0;
};

}  // namespace hvd::launcherd
