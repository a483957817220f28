// hvdrun --ssh: for hosts where no hvd-agent runs as a daemon. hvdrun starts a launcher inside
// itself (like local mode, but listening where the hosts can reach it), connects to every -H host
// with SSH (libssh: keys, known_hosts), starts `hvd-agent --token-file - --stop-on-stdin-eof`
// there pointed back at it, sends the token as the agent's first line of stdin, and waits until
// every agent has registered. Stop() closes the agents' stdin, which stops them (their workers
// first), waits for them to exit, and disconnects. Because an agent also stops when its stdin
// closes for any other reason, a dead hvdrun or a broken connection never leaves one behind.
//
// Any failure (connection refused, unknown or changed host key, authentication, hvd-agent missing
// on the host, an agent that exits or never registers) fails Start within seconds with a message
// naming the host and the step.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "control/flags.h"
#include "control/job_model.h"
#include "hvd/status.h"

namespace hvd::cli {

struct SshFlags {
  bool enabled = false;
  int64_t port = 22;
  std::string identity;
  std::string user;
  std::string known_hosts;
  std::string agent_path = "hvd-agent";
  int64_t connect_timeout = 10;

  void Register(control::FlagSet* flags);
  // Whether the combination makes sense: --ssh needs -H/--hostfile and no --launcher; the ssh
  // flags need --ssh.
  Status Validate(const control::FlagSet& flags, bool has_launcher,
                  const control::JobSpec& spec) const;
};

// The command that starts one host's agent (pure, for tests): quoted for a POSIX shell.
std::string RemoteAgentCommand(const std::string& agent_path, const std::string& launcher,
                               const std::string& host, int slots);

class SshCluster {
 public:
  // `say` prints progress (with --verbose) as "hvdrun: ..." lines; may be null.
  static Status Start(const SshFlags& flags, const control::JobSpec& spec,
                      std::function<void(const std::string&)> say,
                      std::unique_ptr<SshCluster>* out);
  virtual ~SshCluster() = default;

  virtual const std::string& address() const = 0;  // the launcher's gRPC, for hvdrun's client
  virtual const std::string& token() const = 0;
  // Stops every agent (bounded), disconnects, stops the launcher. Idempotent.
  virtual void Stop() = 0;

 protected:
  SshCluster() = default;
};

}  // namespace hvd::cli
