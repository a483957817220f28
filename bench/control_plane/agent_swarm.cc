// hvd_agent_swarm: N simulated hvd-agents in one process, speaking the real AgentGateway protocol
// to a real hvd-launcherd (sim_agent.h says what each one does). A load generator for the
// control-plane benchmark (run.py), never a stand-in for the launcher or the agent in tests.
//
// stdin takes one command per line:
//   release [JOB]  held ranks (argv --hold) of JOB, or of every job, exit; answers "RELEASED n"
//   stats          answers "STATS {json}"
//   quit           stops (as SIGTERM and SIGINT do)
// stdout: "SWARM ..." progress lines and "STATS {json}" lines, the last one with "final": true.
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "base/net.h"
#include "control/flags.h"
#include "control/tls.h"
#include "control/token.h"
#include "swarm.h"

namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kSynopsis =
    "--launcher HOST:PORT --token-file FILE [--agents N] [--slots S] [flags]\n\n"
    "N simulated hvd-agents over the real gRPC protocol, in one process. Commands on stdin:\n"
    "'release [JOB]', 'stats', 'quit'.";

int Fail(const std::string& message) {
  std::fprintf(stderr, "hvd_agent_swarm: %s\n", message.c_str());
  return 2;
}

void PrintStats(const hvd::bench::Swarm& swarm, bool final) {
  nlohmann::json s = swarm.Stats();
  s["final"] = final;
  std::printf("STATS %s\n", s.dump().c_str());
  std::fflush(stdout);
}

// Runs one stdin command; false for "quit".
bool Command(hvd::bench::Swarm& swarm, const std::string& line) {
  if (line == "quit") return false;
  if (line == "stats") {
    PrintStats(swarm, false);
  } else if (line == "release" || line.rfind("release ", 0) == 0) {
    const std::string job = line.size() > 8 ? line.substr(8) : "";
    std::printf("RELEASED %d\n", swarm.Release(job));
    std::fflush(stdout);
  } else if (!line.empty()) {
    std::fprintf(stderr, "hvd_agent_swarm: unknown command '%s' (release [JOB], stats, quit)\n",
                 line.c_str());
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::string launcher, token_file, host_prefix = "sim-";
  int64_t agents = 100, slots = 8, heartbeat_ms = 0, ramp_ms = 0, register_timeout_ms = 10000,
          stats_ms = 0;
  double duration = 0;
  bool help = false;
  hvd::control::TlsFiles tls_files;
  hvd::control::FlagSet flags("hvd_agent_swarm");
  flags.String("--launcher", &launcher, "the launcher's gRPC address (default: $HVD_LAUNCHER)");
  flags.Int("--agents", &agents, "simulated agents (default 100)");
  flags.Int("--slots", &slots, "slots of each agent (default 8)");
  flags.Int("--heartbeat-ms", &heartbeat_ms,
            "heartbeat interval (default 0: what the launcher's RegisterAck says, as hvd-agent)");
  flags.String("--token-file", &token_file,
               "the launcher's cluster token file (default: $HVD_TOKEN_FILE)");
  flags.String("--tls-cert", &tls_files.cert,
               "PEM client certificate, as hvd-agent's (default: $HVD_TLS_CERT, else plain TCP)");
  flags.String("--tls-key", &tls_files.key,
               "PEM private key of --tls-cert (default: $HVD_TLS_KEY)");
  flags.String("--tls-ca", &tls_files.ca, "PEM CA of the launcher (default: $HVD_TLS_CA)");
  flags.Double("--duration", &duration,
               "seconds to run, then stop (default 0: until 'quit', stdin's end, SIGTERM)");
  flags.Int("--ramp-ms", &ramp_ms, "spread the agents' first connections over this long (0)");
  flags.String("--host-prefix", &host_prefix, "host names are PREFIX00000.. (default sim-)");
  flags.Int("--register-timeout-ms", &register_timeout_ms,
            "an attempt without RegisterAck this long is cancelled (10000, as hvd-agent)");
  flags.Int("--stats-interval-ms", &stats_ms, "print a STATS line this often (default 0: never)");
  flags.Bool("--help,-h", &help, "print this help");
  std::vector<std::string> positional;
  hvd::Status s = flags.Parse(argc, argv, 1, false, &positional);
  if (!s.ok()) return Fail(s.message());
  if (help) {
    std::printf("%s", flags.Usage(kSynopsis).c_str());
    return 0;
  }
  if (!positional.empty()) return Fail("unexpected argument '" + positional[0] + "' (--help)");
  if (agents < 1 || agents > 100000) return Fail("--agents must be 1..100000");
  if (slots < 1 || slots > 4096) return Fail("--slots must be 1..4096, as hvd-agent's");
  if (heartbeat_ms < 0 || ramp_ms < 0 || stats_ms < 0 || duration < 0 || register_timeout_ms < 1) {
    return Fail(
        "--heartbeat-ms, --ramp-ms, --stats-interval-ms and --duration must be >= 0, "
        "--register-timeout-ms > 0");
  }
  if (launcher.empty() && std::getenv("HVD_LAUNCHER") != nullptr) {
    launcher = std::getenv("HVD_LAUNCHER");
  }
  if (launcher.empty()) return Fail("--launcher HOST:PORT is required (or set HVD_LAUNCHER)");
  hvd::base::HostPort launcher_hp;
  if (!hvd::base::ParseHostPort(launcher, &launcher_hp).ok()) {
    return Fail("--launcher must be HOST:PORT (the launcher's --listen), got '" + launcher + "'");
  }
  if (token_file.empty() && std::getenv("HVD_TOKEN_FILE") != nullptr) {
    token_file = std::getenv("HVD_TOKEN_FILE");
  }
  if (token_file.empty()) {
    return Fail("--token-file is required (or set HVD_TOKEN_FILE): the launcher's token file");
  }
  hvd::bench::SwarmConfig config;
  config.launcher = launcher;
  config.slots = static_cast<int>(slots);
  config.heartbeat_ms = heartbeat_ms;
  config.register_timeout = std::chrono::milliseconds(register_timeout_ms);
  config.host_prefix = host_prefix;
  s = hvd::control::ReadTokenFile(token_file, &config.token);
  if (!s.ok()) return Fail(s.message());
  hvd::control::TlsFilesFromEnvironment(&tls_files);
  s = hvd::control::LoadTls(tls_files, hvd::control::TlsRole::kAgent, &config.tls);
  if (!s.ok()) return Fail(s.message());

  // The stop signals go to a signalfd read here; blocked before any thread exists, so gRPC's
  // threads and the timer inherit the mask.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a driver that went away: writes fail, the swarm goes on to stop
  const int sigfd = signalfd(-1, &stop_signals, SFD_CLOEXEC);
  if (sigfd < 0) return Fail("signalfd failed");

  {
    auto swarm = std::make_unique<hvd::bench::Swarm>(config, static_cast<int>(agents));
    swarm->Start(std::chrono::milliseconds(ramp_ms));
    std::printf("SWARM started %lld agents x %lld slots against %s\n",
                static_cast<long long>(agents), static_cast<long long>(slots), launcher.c_str());
    std::fflush(stdout);
    const auto start = Clock::now();
    const auto end = duration > 0
                         ? start + std::chrono::milliseconds(static_cast<int64_t>(duration * 1000))
                         : Clock::time_point::max();
    auto next_stats =
        stats_ms > 0 ? start + std::chrono::milliseconds(stats_ms) : Clock::time_point::max();
    bool stdin_open = true, quit = false;
    std::string buffer;
    while (!quit) {
      const auto now = Clock::now();
      if (now >= end) break;
      if (now >= next_stats) {
        PrintStats(*swarm, false);
        next_stats = now + std::chrono::milliseconds(stats_ms);
      }
      const auto wake = std::min(end, next_stats);
      const int64_t wait_ms =
          wake == Clock::time_point::max()
              ? 1000
              : std::max<int64_t>(
                    1, std::chrono::duration_cast<std::chrono::milliseconds>(wake - now).count());
      pollfd fds[2] = {{sigfd, POLLIN, 0}, {0, static_cast<short>(stdin_open ? POLLIN : 0), 0}};
      if (poll(fds, stdin_open ? 2 : 1, static_cast<int>(std::min<int64_t>(wait_ms, 1000))) <= 0) {
        continue;
      }
      if (fds[0].revents & POLLIN) break;  // SIGTERM / SIGINT
      if (!stdin_open || !(fds[1].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char chunk[4096];
      const ssize_t n = read(0, chunk, sizeof(chunk));
      if (n <= 0) {
        stdin_open = false;
        if (duration <= 0) quit = true;  // the driver went away
        continue;
      }
      buffer.append(chunk, static_cast<size_t>(n));
      for (size_t nl; !quit && (nl = buffer.find('\n')) != std::string::npos;) {
        quit = !Command(*swarm, buffer.substr(0, nl));
        buffer.erase(0, nl + 1);
      }
    }
    PrintStats(*swarm, true);
    if (!swarm->Stop(std::chrono::seconds(10))) {
      std::fprintf(stderr, "hvd_agent_swarm: streams still open 10 s after cancelling them\n");
      std::fflush(nullptr);
      std::_Exit(1);  // destroying the agents under live streams would crash instead
    }
    swarm.reset();
  }
  close(sigfd);
  return 0;
}
