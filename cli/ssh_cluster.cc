#include "cli/ssh_cluster.h"

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
}

Status SshFlags::Validate(const control::FlagSet& flags, bool has_launcher,
                          const control::JobSpec& spec) const {
  if (!enabled) {
    for (const char* f : {"--ssh-port", "--ssh-identity", "--ssh-user", "--ssh-known-hosts",
                          "--ssh-agent-path", "--ssh-timeout"}) {
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
  return Status::OK();
}

std::string RemoteAgentCommand(const std::string& agent_path, const std::string& launcher,
                               const std::string& host, int slots) {
  // exec: the shell becomes the agent, so its stdin is the channel's and its exit status the
  // channel's; a missing binary is the shell's 127.
  return "exec " + ShellQuote(agent_path) + " --launcher " + ShellQuote(launcher) +
         " --token-file - --stop-on-stdin-eof --host " + ShellQuote(host) + " --slots " +
         std::to_string(slots);
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
    token_ = control::RandomHex(32);
    launcherd::LauncherOptions lo;
    lo.listen = "0.0.0.0:0";  // the hosts may reach this machine at different addresses
    lo.advertise_host = local;
    lo.token = token_;
    HVD_RETURN_IF_ERROR_CTX(launcherd::Launcher::Start(lo, &launcher_), "--ssh launcher");
    base::HostPort grpc;
    HVD_RETURN_IF_ERROR(base::ParseHostPort(launcher_->grpc_address(), &grpc));
    const std::string port = std::to_string(grpc.port);
    address_ = "127.0.0.1:" + port;
    const std::string for_agents = local + ":" + port;
    if (say_) say_("launcher for the ssh agents at " + for_agents);
    for (const control::HostRequest& h : spec.hosts) {
      SshTarget t;
      t.host = h.host;
      t.port = static_cast<int>(f.port);
      t.user = f.user;
      t.identity = f.identity;
      t.known_hosts = f.known_hosts;
      t.timeout = std::chrono::seconds(f.connect_timeout);
      agents_.push_back(std::make_unique<RemoteAgent>(
          t, RemoteAgentCommand(f.agent_path, for_agents, h.host, h.slots), token_, say_));
    }
    for (auto& a : agents_) a->Begin();
    return WaitRegistered(spec, for_agents,
                          4 * std::chrono::seconds(f.connect_timeout) + kRegisterWait);
  }

 private:
  // Until every host's agent is READY, or one failed, or the deadline.
  Status WaitRegistered(const control::JobSpec& spec, const std::string& for_agents,
                        std::chrono::seconds limit) {
    Client client(address_, token_, std::chrono::seconds(5));
    const auto deadline = Clock::now() + limit;
    while (true) {
      for (auto& a : agents_) {
        std::string why;
        if (a->state(&why) == RemoteAgent::State::kEnded) {
          const std::string tail = a->Tail();
          return Unavailable(why + (tail.empty() ? "" : "; its last output:\n" + tail));
        }
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
