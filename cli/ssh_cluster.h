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
//
// TLS (--ssh-tls-dir DIR, docs/deployment.md "hvdrun --ssh"): DIR is scripts/gen-certs.sh's
// layout at the same path on every host. The launcher inside hvdrun serves gRPC over TLS with
// DIR/NAME.crt (NAME: the name or address the hosts dial it at) or --tls-cert/--tls-key, and
// every agent is started with --tls-cert DIR/HOST.crt --tls-key DIR/HOST.key --tls-ca DIR/ca.crt,
// paths on that host (mutual TLS, as with hvd-launcherd --tls-*).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "control/flags.h"
#include "control/job_model.h"
#include "control/tls.h"
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
  std::string tls_dir;        // --ssh-tls-dir: gen-certs.sh's layout, on every host; "": no TLS
  std::string launcher_host;  // --ssh-launcher-host: the name the hosts dial this machine at
  // --tls-cert/--tls-key/--tls-ca/--tls-crl as given on the command line (Validate keeps them): the
  // launcher's own files instead of DIR's. $HVD_TLS_* are not taken: they name what hvdrun
  // presents to a launcher it dials, not what its own launcher serves.
  control::TlsFiles launcher_tls;

  void Register(control::FlagSet* flags);
  // Whether the combination makes sense: --ssh needs -H/--hostfile and no --launcher; the ssh
  // flags need --ssh; --tls-* with --ssh need --ssh-tls-dir, an existing directory (made
  // absolute here: the agents read it on their hosts). `cluster_tls`: ClusterFlags' --tls-*.
  Status Validate(const control::FlagSet& flags, bool has_launcher, const control::JobSpec& spec,
                  const control::TlsFiles& cluster_tls = {});
};

// What hvdrun --ssh's TLS uses, decided before any host is contacted.
struct SshTlsPlan {
  bool enabled = false;
  control::TlsConfig launcher;  // checked for the server role
  control::TlsConfig client;    // hvdrun's own calls to it: the CA only
  std::string launcher_host;    // what the agents (and hvdrun) dial: a name its certificate has
  bool agents_crl = false;      // DIR/ca.crl exists here: the agents get --tls-crl DIR/ca.crl
};

// The plan for `flags` (after Validate). `names`: what the hosts may dial this machine at, best
// first (--ssh-launcher-host, else its address towards the hosts and its host name). Without
// --ssh-tls-dir: plain TCP at names[0]. Otherwise the launcher's certificate is --tls-cert's or
// DIR/NAME.crt for the first NAME that has one, and the CA --tls-ca's or DIR/ca.crt; every file
// is read and checked (control::LoadTls), and a miss says which paths were tried and how to make
// them. DIR/ca.crl, where it exists here, is every side's --tls-crl (the launcher's unless
// --tls-crl names another).
Status PlanSshTls(const SshFlags& flags, const std::vector<std::string>& names, SshTlsPlan* out);

// The command that starts one host's agent (pure, for tests): quoted for a POSIX shell. With
// `tls_dir`, the agent's TLS files in it for `host` (gen-certs.sh's names), and with `tls_crl`
// its ca.crl.
std::string RemoteAgentCommand(const std::string& agent_path, const std::string& launcher,
                               const std::string& host, int slots, const std::string& tls_dir = "",
                               bool tls_crl = false);

// DIR/HOST without the extension, as scripts/gen-certs.sh names a host's files (an IPv6
// address's ':' become '_').
std::string HostCertBase(const std::string& dir, const std::string& host);

class SshCluster {
 public:
  // `say` prints progress (with --verbose) as "hvdrun: ..." lines; may be null.
  static Status Start(const SshFlags& flags, const control::JobSpec& spec,
                      std::function<void(const std::string&)> say,
                      std::unique_ptr<SshCluster>* out);
  virtual ~SshCluster() = default;

  virtual const std::string& address() const = 0;  // the launcher's gRPC, for hvdrun's client
  virtual const std::string& token() const = 0;
  // What hvdrun's client dials address() with (--ssh-tls-dir: TLS with the CA; else plain TCP).
  virtual const control::TlsConfig& tls() const = 0;
  // Stops every agent (bounded), disconnects, stops the launcher. Idempotent.
  virtual void Stop() = 0;

 protected:
  SshCluster() = default;
};

}  // namespace hvd::cli
