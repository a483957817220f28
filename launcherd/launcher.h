// hvd-launcherd as a class, so the daemon's main() and hvdrun's embedded local mode run the same
// code. Owns the agent registry, the job table, the rendezvous store, the gRPC services (Launcher,
// AgentGateway, Rendezvous), the runtime's rendezvous TCP endpoint and the REST/metrics server.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "control/tls.h"
#include "hvd/status.h"

namespace hvd::launcherd {

struct LauncherOptions {
  std::string listen = "127.0.0.1:0";  // gRPC; port 0: pick a free one
  std::string http_listen;             // REST/metrics "host:port"; empty: no HTTP server
  std::string rendezvous_listen;       // runtime rendezvous TCP "host:port"; empty: the gRPC
                                       // listen host with a free port
  std::string advertise_host;          // host workers dial for rendezvous; empty: listen host
                                       // (or this host's name when listening on 0.0.0.0)
  // The job table (jobs.db, SQLite) lives here and is reloaded at start, so a restarted launcher
  // loses no job; Stop() then leaves running jobs to their agents, to be picked up again by the
  // next start within the lease. Empty: nothing persisted, and Stop() cancels every job.
  std::string state_dir;
  std::string token;  // the cluster token; REQUIRED non-empty
  // --tls-cert/--tls-key/--tls-ca, checked (control/tls.h): gRPC and REST over TLS, agents with
  // a client certificate of the CA only. Not enabled: plain TCP.
  control::TlsConfig tls;
  // REST: /v1/* needs "Authorization: Bearer" with the cluster token or this read-only token
  // (--rest-token-file; empty: none), unless rest_public (--rest-public). /healthz and /metrics
  // are always open.
  std::string rest_token;
  bool rest_public = false;
  std::chrono::milliseconds heartbeat_interval{1000};
  std::chrono::milliseconds lease{5000};         // an agent silent this long is LOST
  std::chrono::milliseconds kill_grace{5000};    // SIGTERM -> SIGKILL when tearing a job down
  std::chrono::milliseconds probe_timeout{500};  // each dial of a job's network probe
  // Every rank must reach the rendezvous within this (jobs may set their own); 0: no limit.
  std::chrono::milliseconds start_timeout{30000};
  // An attached job whose hvdrun has been gone this long is cancelled; 0: the lease.
  std::chrono::milliseconds client_lease{0};
  // hvdrun's local mode: no agent registers but its own (JobManagerOptions::closed_cluster).
  bool closed_cluster = false;
};

class Launcher {
 public:
  // Binds every listener and starts serving. Errors name the address and the reason.
  static Status Start(const LauncherOptions& options, std::unique_ptr<Launcher>* out);
  virtual ~Launcher() = default;

  // Actually bound addresses ("127.0.0.1:41234"), ports resolved.
  virtual std::string grpc_address() const = 0;
  virtual std::string http_address() const = 0;        // "" without HTTP
  virtual std::string rendezvous_address() const = 0;  // what workers get in HVD_RENDEZVOUS

  // Stops accepting work, tells agents to end every running job, closes the listeners. Idempotent.
  virtual void Stop() = 0;
  // Blocks until Stop() has been called (from another thread or a signal handler's thread).
  virtual void Wait() = 0;
};

}  // namespace hvd::launcherd
