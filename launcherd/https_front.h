// HTTPS for the launcher's REST port (--http with --tls-cert): a TLS terminator in front of the
// plain REST server, which then listens on loopback only. The REST server's protections
// (http_gate.h) read the kernel's receive buffer (MSG_PEEK) to find whole request heads, which
// TLS records hide; decrypting first and relaying the plain bytes over loopback keeps them whole.
//
// One epoll thread and non-blocking OpenSSL, so slow clients cost buffers, not threads. Limits:
// at most max_connections at once (at the cap a new connection closes the oldest one still in its
// handshake, so a flood of half-open handshakes cannot keep /healthz out); a handshake must end
// within handshake_timeout; a connection idle (no byte either way) for idle_timeout is closed;
// at most kBufferBytes are buffered each way per connection (reading pauses when full).
// The REST server sees every HTTPS client as 127.0.0.1 (its logs name the front, not the peer);
// the front logs refused handshakes with the peer's address, rate limited.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "control/tls.h"
#include "hvd/status.h"

namespace hvd::launcherd {

struct HttpsFrontOptions {
  std::string listen;   // public "host:port" (port 0: pick one)
  std::string backend;  // the plain REST server, "127.0.0.1:port"
  control::TlsConfig tls;
  size_t max_connections = 256;
  std::chrono::milliseconds handshake_timeout{5000};
  std::chrono::milliseconds idle_timeout{30000};
};

class HttpsFront {
 public:
  static Status Start(const HttpsFrontOptions& options, std::unique_ptr<HttpsFront>* out);
  virtual ~HttpsFront() = default;
  virtual std::string address() const = 0;  // bound "host:port"
  virtual void Stop() = 0;                  // closes every connection; idempotent
};

}  // namespace hvd::launcherd
