// Local mode: one Launcher and one Agent inside the hvdrun process, on 127.0.0.1, with a fresh
// random token, so `hvdrun -np 4 ./train` needs no daemons. They are the same classes
// hvd-launcherd and hvd-agent run, so a job behaves the same locally and on a cluster. Stop()
// (and the destructor) ends every worker before returning; workers also carry PDEATHSIG, so even
// a SIGKILLed hvdrun leaves none behind.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "hvd/status.h"

namespace hvd::cli {

struct EmbeddedOptions {
  int slots = 1;
  std::string agent_host;  // "" : this host's name
  std::chrono::milliseconds kill_grace{5000};
  std::string wrapper_path;  // the worker wrapper binary; "": /proc/self/exe (hvdrun)
};

class EmbeddedCluster {
 public:
  // Starts both and waits (bounded) until the agent has registered, so a job submitted next is
  // placed at once instead of waiting PENDING for an agent.
  static Status Start(const EmbeddedOptions& options, std::unique_ptr<EmbeddedCluster>* out);
  virtual ~EmbeddedCluster() = default;

  virtual const std::string& address() const = 0;  // the launcher's gRPC "127.0.0.1:PORT"
  virtual const std::string& token() const = 0;
  // The token in a file only this user can read (a directory of its own under $XDG_RUNTIME_DIR,
  // $TMPDIR or /tmp, removed by Stop()), so that another shell can ask the embedded launcher
  // about the job (hvdrun --launcher ADDRESS --token-file FILE status JOB); "" where it could
  // not be written (local mode works without it).
  virtual const std::string& token_file() const = 0;
  virtual std::string rendezvous_address() const = 0;
  // Ends every worker (agent first), then the launcher. Idempotent.
  virtual void Stop() = 0;

 protected:
  EmbeddedCluster() = default;
};

// The embedded launcher's and agent's log threshold (hvd's HVD_LOG), set before anything logs.
// In local mode hvdrun is the one reporting (a stall, a failure): their own WARNING lines would
// say it again in other words. So: HVD_LOG_LEVEL (or HOROVOD_LOG_LEVEL) in hvdrun's environment
// when set; else `level` (--log-level's, passed on to the ranks too); else warning with
// --verbose, error without. hvdrun's environment is left as it was (the ranks inherit it).
void SetEmbeddedLogLevel(const std::string& level, bool verbose);

// Whether this build has the embedded launcher and agent (they need hvd_launcherd_lib and
// hvd_agent_lib); without them only --launcher works.
bool HaveEmbeddedCluster();

}  // namespace hvd::cli
