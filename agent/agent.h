// hvd-agent as a class, so the daemon's main() and hvdrun's embedded local mode run the same code.
// Connects to the launcher (one bidirectional gRPC stream, re-established with backoff),
// registers its slots, heartbeats, starts and supervises ranks, forwards their output, and ends
// every process of a job when the job ends, is cancelled, or the launcher has been unreachable
// longer than its lease. With a --state-dir, a restarted agent first kills whatever its previous
// run left (pid_records.h, cgroup.h).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "control/tls.h"
#include "hvd/status.h"

namespace hvd::agent {

struct AgentOptions {
  std::string launcher;        // "host:port" of the launcher's gRPC endpoint; REQUIRED
  std::string token;           // the cluster token; REQUIRED
  // --tls-cert/--tls-key/--tls-ca, checked (control/tls.h): mutual TLS to the launcher. Not
  // enabled: plain TCP.
  control::TlsConfig tls;
  int slots = -1;              // -1: number of GPUs, else 1
  std::string state_dir;       // empty: nothing persisted
  std::string advertise_addr;  // address ranks on this host are reached at; empty: the local
                               // address of the connection to the launcher
  std::string host;            // host name reported to the launcher; empty: gethostname()
  // The binary that runs the worker wrapper (worker_wrapper.h): one whose main() calls
  // RunWorkerWrapperIfAsked first. Empty: hvd-worker-wrapper beside this executable (or in the
  // build tree's agent/ beside cli/) when there is one, since it starts ~7 ms faster per rank;
  // else /proc/self/exe (hvd-agent and hvdrun both run the wrapper too).
  std::string wrapper_path;
  // Put each job in cgroups of its own where this process may create them (cgroup.h).
  bool use_cgroups = true;
  // --network-interface: the interface names and subnets this host offers jobs; empty: all.
  std::string network_interfaces;
  // --allow-run-as-root: a job's --run-as may name root (uid 0). --run-as of any user needs this
  // process to run as root.
  bool allow_run_as_root = false;
};

class Agent {
 public:
  // Starts connecting in the background and returns; the first registration is not awaited.
  static Status Start(const AgentOptions& options, std::unique_ptr<Agent>* out);
  virtual ~Agent() = default;

  // Ends every process it started (SIGTERM, then SIGKILL after the grace period), waits until all
  // are reaped, and disconnects. Idempotent.
  virtual void Stop() = 0;
  // Blocks until Stop() has been called.
  virtual void Wait() = 0;
};

}  // namespace hvd::agent
