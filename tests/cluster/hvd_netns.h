// hvd on a NetnsCluster: hvd-launcherd in the launcher's namespace (gRPC 10.77.0.1:7070,
// rendezvous :7071, REST :7080; the namespace is private, so fixed ports cannot clash) and one
// hvd-agent per host namespace (--host host-a, host-b, ...), started as real processes through the
// harness of tests/cli/hvdrun_process.h (own process group, PDEATHSIG, output in files, bounded
// waits). Stop() ends the agents and the launcher with SIGTERM and checks they exit 0; the
// destructor also kills whatever is left and deletes the namespaces, so a failing test leaks
// nothing.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/cli/hvdrun_process.h"
#include "tests/cluster/netns.h"
#include "testutil/http_get.h"

namespace hvd::clustertest {

struct Binaries {
  std::string launcherd, agent, hvdrun;
};

struct HvdClusterOptions {
  NetnsOptions net;
  int slots = 2;                            // per agent
  bool start_agents = true;                 // false: no agents
  bool start_launcher = true;               // false: no launcher either (SSH tests)
  std::vector<std::string> launcher_flags;  // added to hvd-launcherd's
  // Added to host i's hvd-agent flags.
  std::function<std::vector<std::string>(int host)> agent_flags;
  // NAME=VALUE added to every process's environment (a marker to find them all by).
  std::vector<std::string> env;
};

using testing::HttpAnswer;

class HvdNetnsCluster {
 public:
  static constexpr int kGrpcPort = 7070;
  static constexpr int kHttpPort = 7080;

  // `dir` holds the token and the processes' output; it must outlive the cluster.
  static Status Start(const Binaries& bin, const HvdClusterOptions& options, const std::string& dir,
                      std::unique_ptr<HvdNetnsCluster>* out);
  ~HvdNetnsCluster();

  NetnsCluster& net() { return *net_; }
  std::string launcher() const;  // "10.77.0.1:7070"
  const std::string& token_file() const { return token_file_; }

  // Starts argv inside namespace `ns` with the cluster's environment, in `dir`.
  std::unique_ptr<clitest::Proc> StartIn(const std::string& ns,
                                         const std::vector<std::string>& argv);
  // argv of `hvdrun [subcommand] --launcher ... --token-file ... ARGS` in the launcher namespace.
  std::vector<std::string> Hvdrun(const std::string& subcommand,
                                  const std::vector<std::string>& args) const;
  clitest::ProcResult Run(const std::vector<std::string>& argv_in_ns, std::chrono::seconds timeout);

  // Host i's agent process (null when not started or killed).
  clitest::Proc* agent(int i) { return agents_[i].get(); }
  // SIGKILLs host i's agent and reaps it.
  void KillAgent(int i);
  // Waits until the agents of `hosts` (all when empty) are READY.
  Status WaitAgentsReady(std::chrono::milliseconds timeout, std::vector<int> hosts = {});

  HttpAnswer HttpGet(const std::string& path);
  // GET path as JSON; an error names the path and what came back.
  Status GetJson(const std::string& path, nlohmann::json* out);

  // SIGTERM to every agent, then the launcher; each must exit 0 within 10 s. Idempotent; the
  // errors say which daemon misbehaved and carry its stderr.
  Status Stop();
  // Every pid started through this cluster that is still alive.
  std::vector<pid_t> LivePids() const;

 private:
  HvdNetnsCluster(Binaries bin, HvdClusterOptions options, std::string dir)
      : bin_(std::move(bin)), options_(std::move(options)), dir_(std::move(dir)) {}
  Status Begin();

  const Binaries bin_;
  const HvdClusterOptions options_;
  const std::string dir_;
  std::string token_file_, token_;  // token_: the bearer token REST's /v1/* needs
  std::unique_ptr<NetnsCluster> net_;
  std::unique_ptr<clitest::Proc> launcher_;
  std::vector<std::unique_ptr<clitest::Proc>> agents_;
  std::vector<pid_t> pids_;
};

// Polls `probe` every 20 ms until it returns true or `timeout` passes.
bool WaitUntil(const std::function<bool()>& probe, std::chrono::milliseconds timeout);

}  // namespace hvd::clustertest
