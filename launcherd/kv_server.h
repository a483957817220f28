// The runtime's door to the launcher's rendezvous store: a TCP endpoint speaking the small framed
// protocol of base/kv_protocol.h (libhvd.so must not link gRPC). A connection first
// authenticates with its job's secret, which confines it to that job's keys ("job/<id>/...").
//
// One event-loop thread serves every connection; a WAIT is parked in the store, not on a thread.
// Every input is bounded before it is read (docs/rendezvous.md, "Limits"): frames before HELLO,
// frames after it, bytes in flight per job and in all, connections open and unauthenticated, and
// how long a connection may stay silent.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "control/tls.h"
#include "hvd/status.h"
#include "launcherd/kv_store.h"

namespace hvd::launcherd {

// Maps a job secret to the key prefix it may use ("job/<id>/"); false for an unknown secret. The
// endpoint asks again before each request, so a connection ends with its job.
using SecretResolver = std::function<bool(const std::string& secret, std::string* prefix)>;

struct KvServerOptions {
  // Connections open at once; more are answered UNAVAILABLE (ranks retry) and logged.
  size_t max_connections = 4096;
  // Connections that have not sent a valid HELLO yet: at the limit the oldest is closed to make
  // room, so peers without a secret cannot keep ranks out.
  size_t max_unauthenticated = 256;
  std::chrono::milliseconds hello_timeout{std::chrono::seconds(10)};
  // An authenticated connection with no request in flight for this long is closed with a notice
  // the runtime's client answers by reconnecting when it next needs the store.
  std::chrono::milliseconds idle_timeout{std::chrono::minutes(5)};
  // A frame must arrive whole, and a response be taken by the client, within this long.
  std::chrono::milliseconds io_timeout{std::chrono::seconds(10)};
  // Bytes of requests being received and responses being sent, per job and for all connections;
  // a frame that would pass either is refused (its length is known before any of it is read).
  size_t max_buffered_bytes_per_job = 32u << 20;
  size_t max_buffered_bytes = 256u << 20;
  // Enabled (the launcher's --tls-cert and --tls-key): every connection is TLS (ranks dial
  // hvds://), its handshake bounded by hello_timeout; otherwise plain TCP (hvd://).
  control::TlsConfig tls;
};

struct KvServerStats {
  uint64_t connections = 0;         // open now (all states)
  uint64_t unauthenticated = 0;     // open now, no HELLO yet
  uint64_t waiting = 0;             // open now, parked in a WAIT
  uint64_t buffered_bytes = 0;      // charged for frames in flight now
  uint64_t refused = 0;             // at max_connections, since start
  uint64_t evicted = 0;             // unauthenticated ones closed to make room, since start
  uint64_t closed_idle = 0;         // idle or HELLO timeout, since start
  uint64_t waits_disconnected = 0;  // waits ended because their client left, since start
  uint64_t tls_failed = 0;          // TLS handshakes that failed or timed out, since start
};

class KvServer {
 public:
  // Listens on `listen` ("host:port", port 0 picks one). `store` must outlive the server.
  static Status Start(const std::string& listen, KvStore* store, SecretResolver resolver,
                      std::unique_ptr<KvServer>* out);
  static Status Start(const std::string& listen, KvStore* store, SecretResolver resolver,
                      const KvServerOptions& options, std::unique_ptr<KvServer>* out);
  virtual ~KvServer() = default;
  virtual std::string address() const = 0;  // bound "host:port"
  virtual KvServerStats stats() const = 0;
  // Closes the listener and every connection (their waits end, the store is left as it is).
  // Idempotent.
  virtual void Stop() = 0;
};

}  // namespace hvd::launcherd
