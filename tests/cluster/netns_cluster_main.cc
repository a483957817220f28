// hvd_netns_cluster: a throwaway hvd cluster of network namespaces on this machine, for people and
// benchmarks (the test suites use the same code, tests/cluster/hvd_netns.h).
//
//   hvd_netns_cluster [--hosts K] [--slots N] [--decoy] [--rate 1gbit] [--delay 1ms]
//                     [--delay-by netem|relay]
//                     [--] COMMAND [ARGS...]
//
// Builds K hosts (host-a, host-b, ...) and a launcher namespace, starts hvd-launcherd and one
// hvd-agent per host, runs COMMAND in the launcher's namespace with HVD_LAUNCHER, HVD_TOKEN_FILE
// and HVD_NETNS_HOSTS ("host-a:N,host-b:N,...", for hvdrun -H) set, then stops everything and
// deletes the namespaces, also on SIGINT/SIGTERM. Exits with COMMAND's exit code (2: bad usage,
// 1: the cluster could not be built). Needs root.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "tests/cluster/hvd_netns.h"

namespace {

using hvd::clustertest::HvdClusterOptions;
using hvd::clustertest::HvdNetnsCluster;
using hvd::clustertest::NetnsCluster;

std::atomic<int> g_signal{0};

void OnSignal(int sig) {
  g_signal = sig;
}

int Usage(const std::string& error) {
  if (!error.empty()) std::fprintf(stderr, "hvd_netns_cluster: %s\n", error.c_str());
  std::fprintf(error.empty() ? stdout : stderr,
               "usage: hvd_netns_cluster [--hosts K] [--slots N] [--decoy] [--rate RATE] "
               "[--delay DELAY] [--delay-by netem|relay] [--] COMMAND [ARGS...]\n"
               "  --hosts K     test hosts host-a.. (1..26, default 3)\n"
               "  --slots N     slots per agent (default 1)\n"
               "  --decoy       add decoy0 (172.31.0.x/24, routes nowhere) to every host\n"
               "  --rate RATE   shape every host link both ways (tc tbf), e.g. 1gbit\n"
               "  --delay D     one-way delay per host link, e.g. 100us or 1ms: tc netem where\n"
               "                the kernel has it, else a userspace relay over TUN devices\n"
               "  --delay-by B  netem or relay: how to delay, whatever the kernel has\n");
  return error.empty() ? 0 : 2;
}

// Runs argv (already wrapped in `ip netns exec`) with this process's stdio; forwards a signal
// this process gets. Returns its exit code (128+signal when killed).
int RunCommand(const std::vector<std::string>& argv) {
  const pid_t pid = NetnsCluster::Spawn(argv, -1, -1);
  if (pid < 0) {
    std::perror("hvd_netns_cluster: fork");
    return 1;
  }
  bool forwarded = false;
  int status = 0;
  while (true) {
    const pid_t w = waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    if (g_signal != 0 && !forwarded) {
      kill(pid, g_signal);
      forwarded = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

int main(int argc, char** argv) {
  HvdClusterOptions o;
  o.slots = 1;
  std::vector<std::string> command;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    const char* v = nullptr;
    if (a == "-h" || a == "--help") return Usage("");
    if (a == "--decoy") {
      o.net.decoy = true;
    } else if (a == "--hosts" || a == "--slots") {
      if ((v = value()) == nullptr) return Usage(a + " needs a value");
      const int n = std::atoi(v);
      if (n < 1 || (a == "--hosts" && n > 26)) return Usage(a + ": bad value '" + v + "'");
      (a == "--hosts" ? o.net.hosts : o.slots) = n;
    } else if (a == "--rate" || a == "--delay" || a == "--delay-by") {
      if ((v = value()) == nullptr) return Usage(a + " needs a value");
      (a == "--rate" ? o.net.rate : a == "--delay" ? o.net.delay : o.net.delay_by) = v;
    } else if (a == "--") {
      command.assign(argv + i + 1, argv + argc);
      break;
    } else if (!a.empty() && a[0] == '-') {
      return Usage("unknown flag " + a);
    } else {
      command.assign(argv + i, argv + argc);
      break;
    }
  }
  if (command.empty()) return Usage("no COMMAND to run");
  signal(SIGINT, OnSignal);
  signal(SIGTERM, OnSignal);

  char tmpl[] = "/tmp/hvd_netns_cluster.XXXXXX";
  if (mkdtemp(tmpl) == nullptr) {
    std::perror("hvd_netns_cluster: mkdtemp");
    return 1;
  }
  const std::string dir = tmpl;
  int code = 1;
  {
    std::unique_ptr<HvdNetnsCluster> cluster;
    hvd::Status s =
        HvdNetnsCluster::Start({HVD_LAUNCHERD_PATH, HVD_AGENT_PATH, HVDRUN_PATH}, o, dir, &cluster);
    if (!s.ok()) {
      std::fprintf(stderr, "hvd_netns_cluster: %s\n", s.message().c_str());
    } else if (g_signal == 0) {
      std::string hosts;
      for (int i = 0; i < o.net.hosts; ++i) {
        if (i > 0) hosts += ",";
        hosts += cluster->net().host_name(i) + ":" + std::to_string(o.slots);
      }
      setenv("HVD_LAUNCHER", cluster->launcher().c_str(), 1);
      setenv("HVD_TOKEN_FILE", cluster->token_file().c_str(), 1);
      setenv("HVD_NETNS_HOSTS", hosts.c_str(), 1);
      std::string links;
      if (!o.net.rate.empty()) links += ", links shaped to " + o.net.rate;
      if (!o.net.delay.empty()) {
        links += ", one-way delay " + o.net.delay + " by " +
                 (cluster->net().delay_by() == "relay" ? "a userspace relay (TUN)" : "tc netem");
      }
      std::fprintf(stderr, "hvd_netns_cluster: %d host(s) %s, launcher %s%s\n", o.net.hosts,
                   hosts.c_str(), cluster->launcher().c_str(), links.c_str());
      code = RunCommand(NetnsCluster::In(cluster->net().launcher_ns(), command));
    }
    if (cluster) {
      s = cluster->Stop();
      if (!s.ok()) std::fprintf(stderr, "hvd_netns_cluster: stopping: %s\n", s.message().c_str());
    }
  }  // the namespaces go here
  (void)!std::system(("rm -rf '" + dir + "'").c_str());
  return code;
}
