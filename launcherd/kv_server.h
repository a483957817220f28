// The runtime's door to the launcher's rendezvous store: a TCP endpoint speaking the small framed
// protocol of runtime/rendezvous/kv_protocol.h (libhvd.so must not link gRPC). A connection first
// authenticates with its job's secret, which confines it to that job's keys ("job/<id>/...").
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "hvd/status.h"
#include "launcherd/kv_store.h"

namespace hvd::launcherd {

// Maps a job secret to the key prefix it may use ("job/<id>/"); false for an unknown secret.
using SecretResolver = std::function<bool(const std::string& secret, std::string* prefix)>;

class KvServer {
 public:
  // Listens on `listen` ("host:port", port 0 picks one). `store` must outlive the server.
  static Status Start(const std::string& listen, KvStore* store, SecretResolver resolver,
                      std::unique_ptr<KvServer>* out);
  virtual ~KvServer() = default;
  virtual std::string address() const = 0;  // bound "host:port"
  // Closes the listener and every connection (blocked waits end). Idempotent.
  virtual void Stop() = 0;
};

}  // namespace hvd::launcherd
