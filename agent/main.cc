// hvd-agent: flags and signals only; everything else is hvd::agent::Agent (agent/agent.h).
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "agent/agent.h"
#include "agent/stdin_session.h"
#include "agent/worker_wrapper.h"
#include "base/logging.h"
#include "base/net.h"
#include "control/flags.h"
#include "control/grpc_util.h"
#include "control/tls.h"
#include "control/token.h"

#ifndef HVD_VERSION
#define HVD_VERSION "dev"
#endif

namespace {

constexpr const char* kSynopsis =
    "--launcher HOST:PORT --token-file FILE [--slots N] [flags]\n\n"
    "Runs on every host: registers with hvd-launcherd, starts the ranks it is sent, forwards\n"
    "their output, and ends every process of a job when the job ends or the launcher is gone.\n"
    "SIGINT/SIGTERM stop every worker, then exit 0.";

int Fail(const std::string& message) {
  std::fprintf(stderr, "hvd-agent: %s\n", message.c_str());
  return 2;
}

std::string EnvOr(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && v[0] != '\0' ? v : fallback;
}

// HVD_LOG reads HVD_LOG_LEVEL once, at its first use. --log-level must apply to the agent only,
// not leak into the workers (they inherit the agent's environment), so set it, let logging
// latch it, and put the environment back.
void ApplyLogLevel(const std::string& level) {
  if (level.empty()) return;
  const char* old = std::getenv("HVD_LOG_LEVEL");
  const std::string saved = old != nullptr ? old : "";
  setenv("HVD_LOG_LEVEL", level.c_str(), 1);
  (void)hvd::base::LogEnabled(hvd::base::LogLevel::INFO);
  if (old != nullptr) {
    setenv("HVD_LOG_LEVEL", saved.c_str(), 1);
  } else {
    unsetenv("HVD_LOG_LEVEL");
  }
}

}  // namespace

int main(int argc, char** argv) {
  // A worker wrapper is this binary re-executed by the agent (embedded in hvdrun too).
  hvd::agent::RunWorkerWrapperIfAsked(argc, argv);
  hvd::control::RateLimitGrpcLogs();
  hvd::agent::AgentOptions options;
  std::string token_file;
  std::string log_level;
  int64_t slots = -1;
  bool help = false, version = false, stop_on_eof = false;
  hvd::control::FlagSet flags("hvd-agent");
  flags.String("--launcher", &options.launcher,
               "HOST:PORT of hvd-launcherd's gRPC endpoint (default: $HVD_LAUNCHER)");
  flags.Int("--slots", &slots, "ranks this host runs at once (default: one per GPU, else 1)");
  flags.String("--token-file", &token_file,
               "file holding the cluster token, mode 0600 (default: $HVD_TOKEN_FILE); required; "
               "'-': the first line of stdin");
  hvd::control::TlsFiles tls_files;
  flags.String("--tls-cert", &tls_files.cert,
               "PEM client certificate of this agent, signed by the cluster CA: mutual TLS to a "
               "launcher started with --tls-cert (default: $HVD_TLS_CERT, else plain TCP)");
  flags.String("--tls-key", &tls_files.key,
               "PEM private key of --tls-cert (default: $HVD_TLS_KEY)");
  flags.String("--tls-ca", &tls_files.ca,
               "PEM cluster CA that signed the launcher's certificate (default: $HVD_TLS_CA)");
  flags.String("--tls-crl", &tls_files.crl,
               "PEM CRL(s) of --tls-ca (ca.crl from scripts/gen-certs.sh): a revoked launcher "
               "certificate is refused (default: $HVD_TLS_CRL, else no revocation check)");
  flags.Bool("--stop-on-stdin-eof", &stop_on_eof,
             "stop (as on SIGTERM) when stdin closes: for agents started over SSH by hvdrun --ssh");
  flags.String("--state-dir", &options.state_dir,
               "directory to keep the agent id in across restarts (default: none)");
  flags.String("--advertise-addr", &options.advertise_addr,
               "address other hosts reach this host's ranks at (default: the local address of "
               "the connection to the launcher)");
  flags.String("--host", &options.host, "host name reported to the launcher (default: hostname)");
  flags.String("--network-interface", &options.network_interfaces,
               "NAME[,NAME] or CIDR: the interfaces this host offers jobs, in order of "
               "preference (default: $HVD_IFACE, else all)");
  flags.Bool("--allow-run-as-root", &options.allow_run_as_root,
             "let jobs run ranks as root with hvdrun --run-as root (default: refused; --run-as "
             "needs this agent to run as root in any case)");
  flags.String("--log-level", &log_level,
               "trace, debug, info, warning or error (default: $HVD_LOG_LEVEL, else info: "
               "registration and jobs coming and going)");
  flags.Bool("--help,-h", &help, "print this help");
  flags.Bool("--version", &version, "print the version and exit");
  std::vector<std::string> positional;
  hvd::Status s = flags.Parse(argc, argv, 1, false, &positional);
  if (!s.ok()) {  // FlagSet's message names the program, the flag and --help
    std::fprintf(stderr, "%s\n", s.message().c_str());
    return 2;
  }
  if (help) {
    std::printf("%s", flags.Usage(kSynopsis).c_str());
    return 0;
  }
  if (version) {
    std::printf("hvd-agent %s\n", HVD_VERSION);  // as `hvdrun --version`
    return 0;
  }
  if (!positional.empty()) {
    return Fail("unexpected argument '" + positional[0] + "'; hvd-agent takes only flags (--help)");
  }
  if (!log_level.empty() && log_level != "trace" && log_level != "debug" && log_level != "info" &&
      log_level != "warning" && log_level != "error") {
    return Fail("--log-level must be trace, debug, info, warning or error, got '" + log_level +
                "'");
  }
  if (slots == 0 || slots < -1 || slots > 4096) {
    return Fail("--slots must be between 1 and 4096, got " + std::to_string(slots));
  }
  options.slots = static_cast<int>(slots);
  options.launcher = flags.Given("--launcher") ? options.launcher : EnvOr("HVD_LAUNCHER", "");
  if (!flags.Given("--network-interface")) options.network_interfaces = EnvOr("HVD_IFACE", "");
  if (options.launcher.empty()) {
    return Fail("--launcher HOST:PORT is required (or set HVD_LAUNCHER)");
  }
  hvd::base::HostPort launcher;
  s = hvd::base::ParseHostPort(options.launcher, &launcher);
  if (!s.ok()) return Fail("--launcher: " + s.message());
  token_file = flags.Given("--token-file") ? token_file : EnvOr("HVD_TOKEN_FILE", "");
  if (token_file.empty()) {
    return Fail(
        "--token-file is required (or set HVD_TOKEN_FILE): the file holding the "
        "launcher's cluster token");
  }
  s = token_file == "-" ? hvd::agent::ReadTokenLine(0, std::chrono::seconds(30), &options.token)
                        : hvd::control::ReadTokenFile(token_file, &options.token);
  if (!s.ok()) return Fail(s.message());
  hvd::control::TlsFilesFromEnvironment(&tls_files);
  s = hvd::control::LoadTls(tls_files, hvd::control::TlsRole::kAgent, &options.tls);
  if (!s.ok()) return Fail(s.message());
  // A daemon's log is its record of registration and jobs (INFO); warnings alone would leave it
  // silent in normal operation. hvdrun's embedded agent keeps the default.
  if (log_level.empty() && std::getenv("HVD_LOG_LEVEL") == nullptr &&
      std::getenv("HOROVOD_LOG_LEVEL") == nullptr) {
    log_level = "info";
  }
  ApplyLogLevel(log_level);

  // Block the stop signals in every thread (they inherit this mask) and take them with sigwait
  // here: the workers get a clean mask (RankRunner resets it) and Stop() runs on a normal thread.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  // A daemon outlives whatever reads its log (`| tee`, a collector that restarts): a write to a
  // reader gone is an error to drop, not SIGPIPE ending the agent and every job on it. Workers
  // start with default dispositions (process_spawn.cc resets them).
  signal(SIGPIPE, SIG_IGN);
  if (stop_on_eof) hvd::agent::SigtermOnEof(0);

  std::unique_ptr<hvd::agent::Agent> agent;
  s = hvd::agent::Agent::Start(options, &agent);
  if (!s.ok()) return Fail(s.message());
  int sig = 0;
  sigwait(&stop_signals, &sig);
  HVD_LOG(INFO) << "hvd-agent: " << (sig == SIGINT ? "SIGINT" : "SIGTERM")
                << ": stopping every worker and exiting";
  agent->Stop();
  return 0;
}
