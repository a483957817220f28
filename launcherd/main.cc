// hvd-launcherd: parses flags, finds (or creates) the cluster token, runs a Launcher until SIGINT
// or SIGTERM. Everything else is in hvd_launcherd_lib (launcher.h).
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <iostream>
#include <set>
#include <thread>

#include "base/logging.h"
#include "control/flags.h"
#include "control/grpc_util.h"
#include "control/host_spec.h"
#include "control/tls.h"
#include "control/token.h"
#include "launcherd/launcher.h"
#include "launcherd/listen_address.h"

namespace {

using hvd::Status;

constexpr int kUsageError = 2;

#ifndef HVD_VERSION
#define HVD_VERSION "dev"
#endif

// The private temporary directory LoadToken made for a generated token: removed, token and all,
// when main() returns, so that every run without --token-file/--state-dir does not leave one more
// /tmp/hvd-launcherd-XXXXXX behind (that token is useless once this launcher is gone).
struct GeneratedTokenDir {
  std::string dir;  // empty: none was made
  ~GeneratedTokenDir() {
    if (dir.empty()) return;
    unlink((dir + "/token").c_str());
    if (rmdir(dir.c_str()) != 0) {
      std::cerr << "hvd-launcherd: could not remove " << dir << ": " << std::strerror(errno)
                << "\n";
    }
  }
};

// The token: --token-file, else $HVD_TOKEN_FILE, else <state-dir>/token (kept across restarts, so
// agents and users need not be told again), else a fresh one in a private temporary directory
// (*made names it, to be removed on exit).
Status LoadToken(const std::string& flag_path, const std::string& state_dir, std::string* token,
                 std::string* path, GeneratedTokenDir* made) {
  *path = flag_path;
  if (path->empty()) {
    const char* env = std::getenv("HVD_TOKEN_FILE");
    if (env != nullptr) *path = env;
  }
  if (!path->empty()) return hvd::control::ReadTokenFile(*path, token);
  if (!state_dir.empty()) {
    if (mkdir(state_dir.c_str(), 0700) != 0 && errno != EEXIST) {
      return hvd::InvalidArgument("cannot create --state-dir " + state_dir + ": " +
                                  std::strerror(errno));
    }
    *path = state_dir + "/token";
    struct stat st;
    if (stat(path->c_str(), &st) == 0) return hvd::control::ReadTokenFile(*path, token);
  } else {
    char dir[] = "/tmp/hvd-launcherd-XXXXXX";
    if (mkdtemp(dir) == nullptr) {
      return hvd::Internal(std::string("cannot create a directory for the token in /tmp: ") +
                           std::strerror(errno) + "; pass --token-file or --state-dir");
    }
    *path = std::string(dir) + "/token";
    made->dir = dir;
  }
  HVD_RETURN_IF_ERROR(hvd::control::WriteNewTokenFile(*path, token));
  std::cerr << "hvd-launcherd: generated a cluster token in " << *path
            << "; give it to agents and hvdrun with --token-file " << *path
            << (made->dir.empty() ? "" : " (removed when this launcher exits)") << "\n";
  return Status::OK();
}

}  // namespace

int main(int argc, char** argv) {
  hvd::control::RateLimitGrpcLogs();
  std::string listen = "0.0.0.0:7070", http, rendezvous_listen, advertise_host, state_dir,
              token_file, log_level, rest_token_file;
  int64_t heartbeat_ms = 1000, lease_ms = 5000, kill_grace_ms = 5000, start_timeout_ms = 30000,
          probe_timeout_ms = 500;
  bool help = false, version = false, rest_public = false;
  hvd::control::FlagSet flags("hvd-launcherd");
  flags.String("--listen", &listen, "gRPC address for hvdrun and agents (default 0.0.0.0:7070)");
  flags.String("--http", &http, "REST/metrics address, e.g. 0.0.0.0:7080 (default: off)");
  flags.String("--rendezvous-listen", &rendezvous_listen,
               "address ranks meet at (default: the --listen host, port 7071)");
  flags.String("--advertise-host", &advertise_host,
               "host name or IP workers dial for rendezvous (default: the listen host, or this "
               "machine's name when listening on all interfaces)");
  flags.String("--state-dir", &state_dir,
               "directory for the job table (jobs.db, reloaded at start so a restart loses no "
               "job) and the generated token (default: none; a stop then cancels every job)");
  flags.String("--token-file", &token_file,
               "cluster token file (default: $HVD_TOKEN_FILE, else generated)");
  flags.String("--rest-token-file", &rest_token_file,
               "a second token, for REST only: it opens /v1/* (jobs, agents) and nothing else, so "
               "dashboards need not hold the cluster token (default: none; the cluster token "
               "always works)");
  hvd::control::TlsFiles tls_files;
  flags.String("--tls-cert", &tls_files.cert,
               "PEM certificate of this launcher: gRPC, REST and the rendezvous over TLS (with "
               "--tls-key and --tls-ca; scripts/gen-certs.sh makes them; default: plain TCP)");
  flags.String("--tls-key", &tls_files.key, "PEM private key of --tls-cert");
  flags.String("--tls-ca", &tls_files.ca,
               "PEM cluster CA: agents must present a client certificate it signed");
  flags.String("--tls-crl", &tls_files.crl,
               "PEM CRL(s) of --tls-ca (ca.crl from scripts/gen-certs.sh): agents whose "
               "certificate it revokes are refused (default: no revocation check)");
  flags.Bool("--rest-public", &rest_public,
             "serve /v1/* (argv, working directories, stderr tails) without a token; by default "
             "only /healthz and /metrics are open");
  flags.String("--log-level", &log_level,
               "trace, debug, info, warning or error (default: $HVD_LOG_LEVEL, else info: jobs "
               "and agents coming and going)");
  flags.Int("--heartbeat-interval-ms", &heartbeat_ms, "how often agents heartbeat (1000)");
  flags.Int("--lease-ms", &lease_ms, "an agent silent this long is LOST and its ranks fail (5000)");
  flags.Int("--kill-grace-ms", &kill_grace_ms,
            "SIGTERM to SIGKILL delay when a job is torn down (5000; jobs may set their own)");
  flags.Int("--start-timeout-ms", &start_timeout_ms,
            "every rank must reach the rendezvous this soon or the job fails naming the missing "
            "ones (30000; jobs may set their own; 0: no limit)");
  flags.Int("--probe-timeout-ms", &probe_timeout_ms,
            "how long each dial of a job's network probe may take (500)");
  flags.Bool("--help,-h", &help, "show this help");
  flags.Bool("--version", &version, "print the version and exit");
  std::vector<std::string> positional;
  Status s = flags.Parse(argc, argv, 1, false, &positional);
  if (s.ok() && !positional.empty()) {
    s = hvd::InvalidArgument("hvd-launcherd: unexpected argument '" + positional[0] +
                             "'; it takes flags only (see --help)");
  }
  if (!s.ok()) {
    std::cerr << s.message() << "\n";
    return kUsageError;
  }
  if (help) {
    std::cout << flags.Usage("[flags]");
    return 0;
  }
  if (version) {
    std::cout << "hvd-launcherd " << HVD_VERSION << "\n";  // as `hvdrun --version`
    return 0;
  }
  // A daemon's log is its record of jobs and agents coming and going (INFO); warnings alone
  // would leave it silent in normal operation. hvdrun's embedded launcher keeps the default.
  if (log_level.empty() && std::getenv("HVD_LOG_LEVEL") == nullptr &&
      std::getenv("HOROVOD_LOG_LEVEL") == nullptr) {
    log_level = "info";
  }
  if (!log_level.empty()) {
    static const std::set<std::string> kLevels = {"trace", "debug", "info", "warning", "error"};
    if (!kLevels.count(log_level)) {
      std::cerr << "hvd-launcherd: --log-level " << log_level
                << " is not one of trace, debug, info, warning, error\n";
      return kUsageError;
    }
    setenv("HVD_LOG_LEVEL", log_level.c_str(), 1);  // read once, at the first log line
  }
  hvd::launcherd::LauncherOptions options;
  options.listen = listen;
  options.http_listen = http;
  options.rendezvous_listen = rendezvous_listen;
  std::string rendezvous_flag = "--rendezvous-listen";
  if (options.rendezvous_listen.empty()) {
    rendezvous_flag = "--rendezvous-listen, default: the --listen host, port 7071";
    std::string host;
    int port = 0;
    s = hvd::launcherd::ParseListenAddress(listen, &host, &port);
    if (!s.ok()) {
      std::cerr << "hvd-launcherd: --listen " << s.message() << "\n";
      return kUsageError;
    }
    options.rendezvous_listen =
        (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":7071";
  }
  if (!advertise_host.empty()) {
    s = hvd::control::CheckAddress(advertise_host);
    if (!s.ok()) {
      std::cerr << "hvd-launcherd: --advertise-host: " << s.message() << "\n";
      return kUsageError;
    }
  }
  options.advertise_host = advertise_host;
  options.state_dir = state_dir;
  options.heartbeat_interval = std::chrono::milliseconds(heartbeat_ms);
  options.lease = std::chrono::milliseconds(lease_ms);
  options.kill_grace = std::chrono::milliseconds(kill_grace_ms);
  options.start_timeout = std::chrono::milliseconds(start_timeout_ms);
  if (heartbeat_ms <= 0 || lease_ms <= heartbeat_ms || kill_grace_ms < 0 || start_timeout_ms < 0) {
    std::cerr << "hvd-launcherd: need --heartbeat-interval-ms > 0, --lease-ms above it (a few "
                 "intervals), --kill-grace-ms >= 0 and --start-timeout-ms >= 0; got "
              << heartbeat_ms << ", " << lease_ms << ", " << kill_grace_ms << ", "
              << start_timeout_ms << "\n";
    return kUsageError;
  }
  if (probe_timeout_ms <= 0 || probe_timeout_ms > 60000) {
    std::cerr << "hvd-launcherd: --probe-timeout-ms must be between 1 and 60000, got "
              << probe_timeout_ms << "\n";
    return kUsageError;
  }
  options.probe_timeout = std::chrono::milliseconds(probe_timeout_ms);
  // Each fixed port is tried first, so a busy one is one clear line (and no token is generated
  // for a launcher that cannot start) instead of a bind error from deep inside a server.
  const std::pair<std::string, std::string> ports[] = {
      {listen, "--listen"}, {options.rendezvous_listen, rendezvous_flag}, {http, "--http"}};
  s = hvd::launcherd::CheckDistinctPorts({std::begin(ports), std::end(ports)});
  if (!s.ok()) {
    std::cerr << "hvd-launcherd: " << s.message() << "\n";
    return kUsageError;
  }
  for (const auto& [address, flag] : ports) {
    if (address.empty()) continue;
    s = hvd::launcherd::CheckCanListen(address, flag);
    if (!s.ok()) {
      std::cerr << "hvd-launcherd: " << s.message() << "\n";
      return s.code() == hvd::StatusCode::kInvalidArgument ? kUsageError : 1;
    }
  }
  // Before the cluster token, which may be generated: a bad flag leaves nothing behind.
  if (!rest_token_file.empty()) {
    s = hvd::control::ReadTokenFile(rest_token_file, &options.rest_token);
    if (!s.ok()) {
      std::cerr << "hvd-launcherd: --rest-token-file: " << s.message() << "\n";
      return kUsageError;
    }
  }
  options.rest_public = rest_public;
  s = hvd::control::LoadTls(tls_files, hvd::control::TlsRole::kServer, &options.tls);
  if (!s.ok()) {
    std::cerr << "hvd-launcherd: " << s.message() << "\n";
    return kUsageError;
  }
  std::string token_path;
  GeneratedTokenDir generated_token_dir;  // removed on every return from here on
  s = LoadToken(token_file, state_dir, &options.token, &token_path, &generated_token_dir);
  if (!s.ok()) {
    std::cerr << "hvd-launcherd: " << s.message() << "\n";
    return kUsageError;
  }

  // Signals go to one thread that stops the launcher; block them before any thread starts.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  // A daemon outlives whatever reads its log (`| tee`, a collector that restarts): a write to a
  // reader gone is an error to drop, not SIGPIPE ending the launcher and, without --state-dir,
  // every job it holds.
  signal(SIGPIPE, SIG_IGN);

  std::unique_ptr<hvd::launcherd::Launcher> launcher;
  s = hvd::launcherd::Launcher::Start(options, &launcher);
  if (!s.ok()) {
    std::cerr << s.message() << "\n";
    // A malformed address is a usage error; a port in use is not.
    return s.code() == hvd::StatusCode::kInvalidArgument ? kUsageError : 1;
  }
  // With TLS the schemes say so: what an operator checks first after turning it on.
  const bool tls = options.tls.enabled();
  std::cout << "hvd-launcherd: gRPC " << launcher->grpc_address() << (tls ? " (TLS)" : "")
            << ", rendezvous " << (tls ? "hvds://" : "") << launcher->rendezvous_address()
            << (http.empty() ? "" : (tls ? ", HTTPS " : ", HTTP ") + launcher->http_address())
            << ", token " << token_path << std::endl;
  // The only caller of Stop(), so once Wait() returns the thread has finished with it.
  std::chrono::steady_clock::time_point signalled;  // written by the stopper, read after join
  std::thread stopper([&launcher, &signalled, signals] {
    int sig = 0;
    sigwait(&signals, &sig);
    std::cerr << "hvd-launcherd: " << strsignal(sig) << ", stopping\n";
    signalled = std::chrono::steady_clock::now();
    launcher->Stop();  // bounded: about a second, whatever the launcher is doing (launcher.cc)
  });
  launcher->Wait();
  stopper.join();
  launcher.reset();
  HVD_LOG(INFO) << "exiting "
                << std::chrono::duration_cast<std::chrono::milliseconds>(
                       std::chrono::steady_clock::now() - signalled)
                       .count()
                << " ms after the signal";
  return 0;
}
