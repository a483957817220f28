#include "cli/ssh_cluster.h"

#include <sys/stat.h>
#include <unistd.h>

#include <thread>

#include "cli/ssh_session.h"

#if HVD_CLI_EMBEDDED && HVD_CLI_SSH
#include "agent/host_info.h"
#include "base/net.h"
#include "cli/client.h"
#include "cli/ssh_agent.h"
#include "control/token.h"
#include "launcherd/launcher.h"
#endif

namespace hvd::cli {

void SshFlags::Register(control::FlagSet* flags) {
  flags->Bool("--ssh", &enabled,
              "start hvd-agent on every -H host over SSH for this job (hosts without an agent)");
  flags->Int("--ssh-port,-p", &port, "SSH port of the hosts (default 22)");
  flags->String("--ssh-identity,-i", &identity,
                "private key file (default: the ssh-agent's and ~/.ssh's keys)");
  flags->String("--ssh-user", &user, "user to log in as (default: ~/.ssh/config's, else yours)");
  flags->String("--ssh-known-hosts", &known_hosts,
                "known_hosts file the hosts' keys are checked against (default "
                "~/.ssh/known_hosts); unknown or changed keys are refused");
  flags->String("--ssh-agent-path", &agent_path,
                "hvd-agent's path on the hosts (default: hvd-agent in their PATH)");
  flags->Int("--ssh-timeout", &connect_timeout, "seconds each SSH step may take (default 10)");
  flags->String("--ssh-tls-dir", &tls_dir,
                "TLS for the agents and the launcher in hvdrun: a directory as gen-certs.sh "
                "writes it (ca.crt, HOST.crt, HOST.key), at the same path on every host; each "
                "agent gets DIR/HOST.crt, DIR/HOST.key (HOST: its -H name) and DIR/ca.crt, the "
                "launcher DIR/NAME.crt (NAME: --ssh-launcher-host, else this machine's address "
                "towards the hosts, else its host name) unless --tls-cert/--tls-key/--tls-ca "
                "name its own; all also DIR/ca.crl when it exists here (default: plain TCP)");
  flags->String("--ssh-launcher-host", &launcher_host,
                "the name or address the hosts reach this machine at (default: its address on "
                "the route to the first host); with --ssh-tls-dir, one its certificate names");
}

Status SshFlags::Validate(const control::FlagSet& flags, bool has_launcher,
                          const control::JobSpec& spec, const control::TlsFiles& cluster_tls) {
  if (!enabled) {
    for (const char* f :
         {"--ssh-port", "--ssh-identity", "--ssh-user", "--ssh-known-hosts", "--ssh-agent-path",
          "--ssh-timeout", "--ssh-tls-dir", "--ssh-launcher-host"}) {
      if (flags.Given(f)) {
        // horovodrun's -p and -i mean SSH too, but hvdrun uses SSH only when asked to.
        return InvalidArgument(flags.GivenAs(f) +
                               " needs --ssh: add --ssh to start agents on the " +
                               "-H hosts over SSH, or drop " + flags.GivenAs(f) +
                               " when agents already run there (--launcher HOST:PORT)");
      }
    }
    return Status::OK();
  }
  if (has_launcher) {
    return InvalidArgument(
        "--ssh starts its own agents and launcher; drop --launcher (or HVD_LAUNCHER), or drop "
        "--ssh to use the agents of that launcher");
  }
  if (spec.hosts.empty()) {
    return InvalidArgument(
        "--ssh needs the hosts to start agents on: -H host1:N,host2:N or "
        "--hostfile");
  }
  if (port < 1 || port > 65535) {
    return InvalidArgument("--ssh-port must be 1..65535, not " + std::to_string(port));
  }
  if (connect_timeout < 1 || connect_timeout > 600) {
    return InvalidArgument("--ssh-timeout must be 1..600 seconds, not " +
                           std::to_string(connect_timeout));
  }
  if (agent_path.empty()) return InvalidArgument("--ssh-agent-path is empty");
  if (flags.Given("--ssh-launcher-host") && launcher_host.empty()) {
    return InvalidArgument("--ssh-launcher-host is empty");
  }
  // Only what the command line says: the environment's HVD_TLS_* are hvdrun's client side.
  launcher_tls = {};
  if (flags.Given("--tls-cert")) launcher_tls.cert = cluster_tls.cert;
  if (flags.Given("--tls-key")) launcher_tls.key = cluster_tls.key;
  if (flags.Given("--tls-ca")) launcher_tls.ca = cluster_tls.ca;
  if (flags.Given("--tls-crl")) launcher_tls.crl = cluster_tls.crl;
  if (tls_dir.empty()) {
    if (flags.Given("--ssh-tls-dir")) return InvalidArgument("--ssh-tls-dir is empty");
    for (const char* f : {"--tls-cert", "--tls-key", "--tls-ca", "--tls-crl"}) {
      if (!flags.Given(f)) continue;
      // Silently plain TCP would be worse than refusing.
      return InvalidArgument(std::string(f) +
                             " with --ssh needs --ssh-tls-dir DIR: where the agents' "
                             "certificates are on the hosts (scripts/gen-certs.sh's layout, the "
                             "same path on every host); without it the agents and hvdrun's "
                             "launcher talk plain TCP");
    }
    return Status::OK();
  }
  if (tls_dir[0] != '/') {
    // The agents read it on their hosts, where the shell starts in the login directory.
    char cwd[4096];
    if (getcwd(cwd, sizeof(cwd)) == nullptr) {
      return InvalidArgument("--ssh-tls-dir " + tls_dir + ": give an absolute path");
    }
    const std::string here = cwd;
    tls_dir = here + (here.back() == '/' ? "" : "/") + tls_dir;
  }
  struct stat st;
  if (stat(tls_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return InvalidArgument("--ssh-tls-dir " + tls_dir +
                           ": no such directory here; make it with scripts/gen-certs.sh --out " +
                           tls_dir + " --hosts THIS_HOST,HOST1,HOST2... and copy it to the same " +
                           "path on every host");
  }
  return Status::OK();
}

std::string HostCertBase(const std::string& dir, const std::string& host) {
  std::string file = host;
  for (char& c : file) {
    if (c == ':') c = '_';
  }
  return dir + "/" + file;
}

Status PlanSshTls(const SshFlags& flags, const std::vector<std::string>& names, SshTlsPlan* out) {
  *out = {};
  if (names.empty()) return InvalidArgument("--ssh: no name for this machine");
  out->launcher_host = names[0];
  if (flags.tls_dir.empty()) return Status::OK();
  control::TlsFiles files = flags.launcher_tls;
  if (files.ca.empty()) files.ca = flags.tls_dir + "/ca.crt";
  // gen-certs.sh writes a CRL beside the CA: where DIR has one, every side checks against it.
  const std::string crl = flags.tls_dir + "/ca.crl";
  out->agents_crl = access(crl.c_str(), F_OK) == 0;
  if (files.crl.empty() && out->agents_crl) files.crl = crl;
  if (files.cert.empty() && files.key.empty()) {
    std::string tried;
    for (const std::string& n : names) {
      const std::string base = HostCertBase(flags.tls_dir, n);
      if (access((base + ".crt").c_str(), F_OK) == 0) {
        files.cert = base + ".crt";
        files.key = base + ".key";
        out->launcher_host = n;
        break;
      }
      tried += (tried.empty() ? "" : ", ") + base + ".crt";
    }
    if (files.cert.empty()) {
      return InvalidArgument(
          "--ssh-tls-dir " + flags.tls_dir + ": no certificate for the launcher on this " +
          "machine (looked for " + tried + "); make one with scripts/gen-certs.sh --out " +
          flags.tls_dir + " --hosts " + names[0] + " (a name the hosts reach this machine " +
          "at; --ssh-launcher-host picks it), or pass --tls-cert and --tls-key");
    }
  }
  HVD_RETURN_IF_ERROR_CTX(control::LoadTls(files, control::TlsRole::kServer, &out->launcher),
                          "--ssh-tls-dir: the launcher in hvdrun");
  HVD_RETURN_IF_ERROR_CTX(
      control::LoadTls({.cert = "", .key = "", .ca = files.ca, .crl = files.crl},
                       control::TlsRole::kClient, &out->client),
      "--ssh-tls-dir: hvdrun's calls to its launcher");
  out->enabled = true;
  return Status::OK();
}

std::string RemoteAgentCommand(const std::string& agent_path, const std::string& launcher,
                               const std::string& host, int slots, const std::string& tls_dir,
                               bool tls_crl) {
  // exec: the shell becomes the agent, so its stdin is the channel's and its exit status the
  // channel's; a missing binary is the shell's 127.
  std::string cmd = "exec " + ShellQuote(agent_path) + " --launcher " + ShellQuote(launcher) +
                    " --token-file - --stop-on-stdin-eof --host " + ShellQuote(host) + " --slots " +
                    std::to_string(slots);
  if (tls_dir.empty()) return cmd;
  const std::string base = HostCertBase(tls_dir, host);
  cmd += " --tls-cert " + ShellQuote(base + ".crt") + " --tls-key " + ShellQuote(base + ".key") +
         " --tls-ca " + ShellQuote(tls_dir + "/ca.crt");
  return tls_crl ? cmd + " --tls-crl " + ShellQuote(tls_dir + "/ca.crl") : cmd;
}

#if HVD_CLI_EMBEDDED && HVD_CLI_SSH
namespace {

using Clock = std::chrono::steady_clock;

// How long agents may take to register once started, beyond the SSH steps themselves.
constexpr auto kRegisterWait = std::chrono::seconds(15);
// How long a stopping agent may take to stop its workers (their SIGTERM grace is 5 s) and exit.
constexpr auto kStopGrace = std::chrono::seconds(8);

class SshClusterImpl : public SshCluster {
 public:
  ~SshClusterImpl() override { Stop(); }

  const std::string& address() const override { return address_; }
  const std::string& token() const override { return token_; }

  void Stop() override {
    // All at once: each waits for its own agent.
    std::vector<std::thread> stoppers;
    for (auto& a : agents_) stoppers.emplace_back([&a] { a->Stop(kStopGrace); });
    for (std::thread& t : stoppers) t.join();
    for (auto& a : agents_) {
      std::string why;
      if (a->state(&why) == RemoteAgent::State::kEnded && !why.empty() && say_) say_(why);
    }
    agents_.clear();
    if (launcher_) launcher_->Stop();
    launcher_.reset();
  }

  Status Begin(const SshFlags& f, const control::JobSpec& spec,
               std::function<void(const std::string&)> say) {
    say_ = std::move(say);
    const std::string first = spec.hosts[0].host;
    // The address the hosts reach this machine at: the source of its route to them.
    std::string local;
    HVD_RETURN_IF_ERROR_CTX(
        agent::LocalAddressTowards(first + ":" + std::to_string(f.port), &local),
        "--ssh: finding this machine's address towards " + first);
    // Before anything starts: a missing or wrong certificate is one clear line.
    std::vector<std::string> names = {f.launcher_host};
    if (f.launcher_host.empty()) names = {local, base::LocalHostName("")};
    if (names.back().empty()) names.pop_back();
    SshTlsPlan tls;
    HVD_RETURN_IF_ERROR(PlanSshTls(f, names, &tls));
    tls_ = tls.client;
    token_ = control::RandomHex(32);
    launcherd::LauncherOptions lo;
    lo.listen = "0.0.0.0:0";  // the hosts may reach this machine at different addresses
    // Ranks check the hvds:// rendezvous against this name: the one the certificate names.
    lo.advertise_host = tls.enabled ? tls.launcher_host
                                    : (f.launcher_host.empty() ? local : f.launcher_host);
    lo.token = token_;
    lo.tls = tls.launcher;
    HVD_RETURN_IF_ERROR_CTX(launcherd::Launcher::Start(lo, &launcher_), "--ssh launcher");
    base::HostPort grpc;
    HVD_RETURN_IF_ERROR(base::ParseHostPort(launcher_->grpc_address(), &grpc));
    const std::string port = std::to_string(grpc.port);
    const std::string for_agents = tls.launcher_host + ":" + port;
    // With TLS hvdrun dials the name the certificate has, as the agents do; it is this machine.
    address_ = tls.enabled ? for_agents : "127.0.0.1:" + port;
    if (say_) {
      say_("launcher for the ssh agents at " + for_agents +
           (tls.enabled ? " (TLS, agents' files in " + f.tls_dir + ")" : ""));
    }
    for (const control::HostRequest& h : spec.hosts) {
      SshTarget t;
      t.host = h.host;
      t.port = static_cast<int>(f.port);
      t.user = f.user;
      t.identity = f.identity;
      t.known_hosts = f.known_hosts;
      t.timeout = std::chrono::seconds(f.connect_timeout);
      agents_.push_back(std::make_unique<RemoteAgent>(
          t,
          RemoteAgentCommand(f.agent_path, for_agents, h.host, h.slots,
                             tls.enabled ? f.tls_dir : "", tls.agents_crl),
          token_, say_));
    }
    for (auto& a : agents_) a->Begin();
    return WaitRegistered(spec, for_agents,
                          4 * std::chrono::seconds(f.connect_timeout) + kRegisterWait,
                          tls.enabled ? f.tls_dir : "", tls.agents_crl);
  }

  const control::TlsConfig& tls() const override { return tls_; }

 private:
  // Until every host's agent is READY, or one failed, or the deadline.
  Status WaitRegistered(const control::JobSpec& spec, const std::string& for_agents,
                        std::chrono::seconds limit, const std::string& tls_dir, bool crl) {
    Client client(address_, token_, std::chrono::seconds(5), tls_);
    const auto deadline = Clock::now() + limit;
    while (true) {
      for (size_t i = 0; i < agents_.size(); ++i) {
        std::string why;
        if (agents_[i]->state(&why) != RemoteAgent::State::kEnded) continue;
        const std::string tail = agents_[i]->Tail();
        // The agent's own line says which file is wrong; say where --ssh-tls-dir expects them.
        const std::string base = HostCertBase(tls_dir, spec.hosts[i].host);
        const std::string hint = !tls_dir.empty() && tail.find("--tls-") != std::string::npos
                                     ? "\n(--ssh-tls-dir: that host needs " + base + ".crt, " +
                                           base + ".key and " + tls_dir + "/ca.crt" +
                                           (crl ? " and " + tls_dir + "/ca.crl" : "") +
                                           ", e.g. from scripts/gen-certs.sh --hosts " +
                                           spec.hosts[i].host + ")"
                                     : "";
        return Unavailable(why + (tail.empty() ? "" : "; its last output:\n" + tail) + hint);
      }
      std::vector<control::AgentInfo> listed;
      if (client.ListAgents(&listed).ok()) {
        size_t ready = 0;
        for (const control::HostRequest& h : spec.hosts) {
          for (const control::AgentInfo& a : listed) {
            if (a.host == h.host && a.state == "READY") {
              ++ready;
              break;
            }
          }
        }
        if (ready == spec.hosts.size()) return Status::OK();
      }
      if (Clock::now() >= deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    for (size_t i = 0; i < agents_.size(); ++i) {
      std::string why;
      if (agents_[i]->state(&why) != RemoteAgent::State::kStarted) continue;
      const std::string tail = agents_[i]->Tail();
      return DeadlineExceeded("ssh " + spec.hosts[i].host +
                              ": hvd-agent started but did not register with the launcher at " +
                              for_agents + " within " + std::to_string(limit.count()) +
                              " s (can that host reach this address?)" +
                              (tail.empty() ? "" : "; its last output:\n" + tail));
    }
    return DeadlineExceeded("ssh: the agents did not all start within " +
                            std::to_string(limit.count()) + " s");
  }

  std::function<void(const std::string&)> say_;
  std::string token_, address_;
  control::TlsConfig tls_;  // hvdrun's side of its launcher's TLS; plain TCP when not enabled
  std::unique_ptr<launcherd::Launcher> launcher_;
  std::vector<std::unique_ptr<RemoteAgent>> agents_;
};

}  // namespace

Status SshCluster::Start(const SshFlags& flags, const control::JobSpec& spec,
                         std::function<void(const std::string&)> say,
                         std::unique_ptr<SshCluster>* out) {
  auto impl = std::make_unique<SshClusterImpl>();
  HVD_RETURN_IF_ERROR(impl->Begin(flags, spec, std::move(say)));  // the destructor cleans up
  *out = std::move(impl);
  return Status::OK();
}

#else

Status SshCluster::Start(const SshFlags&, const control::JobSpec&,
                         std::function<void(const std::string&)>, std::unique_ptr<SshCluster>*) {
  return Unimplemented(
      "this hvdrun was built without SSH support (libssh) or without the embedded launcher; "
      "start hvd-agent on the hosts yourself and pass --launcher");
}

#endif

}  // namespace hvd::cli
