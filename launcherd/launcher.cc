// LauncherImpl: wires the store, the registry, the job manager, the three gRPC services, the
// runtime's rendezvous endpoint, the HTTP server and the lease sweeper, and takes them down in an
// order that lets agents hear StopJob before their streams close.
#include "launcherd/launcher.h"

#include <grpcpp/grpcpp.h>
#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <thread>

#include "base/logging.h"
#include "base/mutex.h"
#include "base/net.h"
#include "control/tls_grpc.h"
#include "control/token.h"
#include "control/token_gate.h"
#include "launcherd/agent_gateway_service.h"
#include "launcherd/agent_registry.h"
#include "launcherd/http_server.h"
#include "launcherd/job_manager.h"
#include "launcherd/job_store.h"
#include "launcherd/kv_server.h"
#include "launcherd/kv_store.h"
#include "launcherd/launcher_service.h"
#include "launcherd/listen_address.h"
#include "launcherd/network_check.h"
#include "launcherd/rendezvous_service.h"

namespace hvd::launcherd {
namespace {

// How long Stop() may take in all, whatever the launcher is doing (issue 22: SIGTERM stops it
// within a second). Waiting for ranks to be reported gone, the StopJob messages' drain and the
// gRPC server's shutdown share it; what does not fit is cut short: agents still get StopJob (sent
// before any wait) and end a job's ranks themselves once the launcher is gone past the lease.
constexpr auto kStopBudget = std::chrono::milliseconds(900);
// Within it, what is kept for the drain of queued StopJob messages and for in-flight calls.
constexpr auto kDrainTimeout = std::chrono::milliseconds(250);
constexpr auto kShutdownGrace = std::chrono::milliseconds(200);
constexpr auto kTrimAfterQuiet = std::chrono::seconds(1);

std::chrono::milliseconds Left(std::chrono::steady_clock::time_point deadline,
                               std::chrono::milliseconds keep = std::chrono::milliseconds(0)) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now() - keep);
  return std::max(left, std::chrono::milliseconds(0));
}
// The largest message any caller may send, checked by gRPC before a handler (and its token
// check) runs: a call without a token is buffered up to this much, so it stays small (issue 20,
// finding 7: eight 60 MiB calls once cost 661 MiB). The largest legitimate messages fit: a job
// spec within control/spec_limits.h (argv 256 KiB, environment 512 KiB), an agent's output batch
// (1 MiB, agent/outbox.h). gRPC's own default, and what hvd's clients accept in return.
constexpr int kMaxMessageBytes = 4 << 20;

// Plain TCP there reaches this machine only: no warning for it.
bool IsLoopbackHost(const std::string& host) {
  return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1" || host == "[::1]";
}

Status ValidateOptions(const LauncherOptions& o) {
  if (o.token.empty()) {
    return InvalidArgument(
        "the launcher needs a cluster token: pass --token-file (or set "
        "HVD_TOKEN_FILE)");
  }
  if (o.heartbeat_interval.count() <= 0 || o.lease <= o.heartbeat_interval) {
    return InvalidArgument("the lease (" + std::to_string(o.lease.count()) +
                           " ms) must be longer than the heartbeat interval (" +
                           std::to_string(o.heartbeat_interval.count()) +
                           " ms), which must be > 0; a few intervals is typical (--lease-ms)");
  }
  if (o.probe_timeout.count() <= 0) {
    return InvalidArgument("the network probe timeout must be > 0 ms (--probe-timeout-ms)");
  }
  if (o.kill_grace.count() < 0) {
    return InvalidArgument("the kill grace must be >= 0 ms (--kill-grace-ms)");
  }
  return Status::OK();
}

class LauncherImpl final : public Launcher {
 public:
  explicit LauncherImpl(const LauncherOptions& options)
      : options_(options), registry_(options.lease) {}
  ~LauncherImpl() override { Stop(); }

  Status Init() {
    std::string grpc_host;
    int grpc_port = 0;
    HVD_RETURN_IF_ERROR_CTX(ParseListenAddress(options_.listen, &grpc_host, &grpc_port),
                            "--listen");

    // The runtime's endpoint first: its port goes into every worker's HVD_RENDEZVOUS.
    const std::string kv_listen = options_.rendezvous_listen.empty()
                                      ? (IsWildcardHost(grpc_host) ? "0.0.0.0" : grpc_host) + ":0"
                                      : options_.rendezvous_listen;
    std::string kv_host;
    int kv_port = 0;
    HVD_RETURN_IF_ERROR_CTX(ParseListenAddress(kv_listen, &kv_host, &kv_port),
                            "--rendezvous-listen");
    // Ranks reaching the rendezvous and the runtime's stall reports arrive as store writes.
    store_.SetObserver([this](const std::string& key, const std::string& value) {
      if (JobManager* jobs = jobs_ptr_.load()) jobs->OnRendezvousKey(key, value);
    });
    SecretResolver resolver = [this](const std::string& secret, std::string* prefix) {
      JobManager* jobs = jobs_ptr_.load();
      return jobs != nullptr && jobs->ResolveSecret(secret, prefix);
    };
    KvServerOptions kv_options;
    kv_options.tls = options_.tls;  // the rendezvous is TLS whenever gRPC is (docs/security.md)
    HVD_RETURN_IF_ERROR_CTX(KvServer::Start(kv_listen, &store_, resolver, kv_options, &kv_server_),
                            "rendezvous endpoint (--rendezvous-listen)");
    std::string bound_host;
    HVD_RETURN_IF_ERROR(ParseListenAddress(kv_server_->address(), &bound_host, &kv_port));
    std::string advertise = options_.advertise_host;
    if (advertise.empty()) advertise = IsWildcardHost(kv_host) ? base::LocalHostName() : kv_host;
    rendezvous_address_ = advertise + ":" + std::to_string(kv_port);

    NetworkCheckOptions no;
    no.dial_timeout = options_.probe_timeout;
    network_ = std::make_unique<NetworkCheck>(no, &registry_);
    JobManagerOptions jo;
    jo.network = network_.get();
    jo.master_port_timeout = no.answer_timeout;  // as for a step of the network probe
    jo.rendezvous_address = rendezvous_address_;
    jo.rendezvous_tls = options_.tls.enabled();
    jo.kill_grace = options_.kill_grace;
    jo.reconcile_after = options_.kill_grace + 2 * options_.heartbeat_interval + options_.lease;
    jo.start_timeout = options_.start_timeout;
    jo.client_lease = options_.client_lease.count() > 0 ? options_.client_lease : options_.lease;
    jo.closed_cluster = options_.closed_cluster;
    if (!options_.state_dir.empty()) {
      HVD_RETURN_IF_ERROR_CTX(JobStore::Open(options_.state_dir, &job_store_), "--state-dir");
      jo.job_store = job_store_.get();
    }
    jobs_ = std::make_unique<JobManager>(jo, &registry_, &store_);
    std::vector<AgentInfo> expected;
    HVD_RETURN_IF_ERROR(jobs_->Restore(&expected));
    jobs_->Publish();  // readers (REST, ListJobs) see the restored table from the start
    registry_.Expect(expected);
    jobs_ptr_.store(jobs_.get());
    network_->SetOnDone([this] { jobs_->Schedule(); });  // a probe ended: place its job again

    launcher_service_ = std::make_unique<LauncherService>(jobs_.get(), &registry_);
    gateway_service_ = std::make_unique<AgentGatewayService>(
        &registry_, jobs_.get(), options_.heartbeat_interval, options_.lease);
    gateway_service_->SetNetworkCheck(network_.get());
    rendezvous_service_ = std::make_unique<RendezvousService>(&store_, options_.token, resolver);
    grpc::ServerBuilder builder;
    int selected_port = 0;
    // The token gate (control/token_gate.h) is the one token check of every service: it fails a
    // call before gRPC reads its message (a caller without a token costs the launcher a few KiB,
    // not up to kMaxMessageBytes per call), and before any handler runs.
    control::TokenAcceptor gate = [this, resolver](std::string_view method,
                                                   std::string_view token) {
      return AcceptToken(options_.token, resolver, method, token);
    };
    builder.AddListeningPort(options_.listen, control::ServerCredentialsFor(options_.tls, gate),
                             &selected_port);
    // Without this a second launcher on the same port would bind too and steal half the calls.
    builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
    // No bandwidth-delay probing: it answers reads with PINGs, a sendmsg and a wakeup per agent
    // message at a thousand agents, for streams that carry small messages (issue 22).
    builder.AddChannelArgument(GRPC_ARG_HTTP2_BDP_PROBE, 0);
    builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
    builder.RegisterService(launcher_service_.get());
    builder.RegisterService(gateway_service_.get());
    builder.RegisterService(rendezvous_service_.get());
    server_ = builder.BuildAndStart();
    if (!server_ || selected_port == 0) {
      return Unavailable("cannot listen for gRPC on " + options_.listen +
                         ": the port is in use or the host is not an address of this machine; "
                         "pick another --listen");
    }
    grpc_address_ = grpc_host + ":" + std::to_string(selected_port);
    if (!options_.tls.enabled() && !IsLoopbackHost(grpc_host)) {
      HVD_LOG(WARNING) << "gRPC on " << grpc_address_
                       << " is plain TCP on a non-loopback address: the cluster token and job "
                          "specs cross the network in clear; use --tls-cert, --tls-key and "
                          "--tls-ca (scripts/gen-certs.sh; docs/security.md, \"TLS\")";
    }

    if (!options_.http_listen.empty()) {
      HttpOptions http;
      http.listen = options_.http_listen;
      http.tokens = {options_.token, options_.rest_token};
      http.public_api = options_.rest_public;
      http.tls = options_.tls;  // HTTPS with the gRPC certificate
      HVD_RETURN_IF_ERROR(HttpServer::Start(http, jobs_.get(), &registry_, &store_, &http_));
    }
    sweeper_ = std::thread([this] { SweepLoop(); });
    HVD_LOG(INFO) << "hvd-launcherd: gRPC on " << grpc_address_ << ", rendezvous on "
                  << rendezvous_address_ << (http_ ? ", HTTP on " + http_->address() : "");
    return Status::OK();
  }

  std::string grpc_address() const override { return grpc_address_; }
  std::string http_address() const override { return http_ ? http_->address() : ""; }
  std::string rendezvous_address() const override { return rendezvous_address_; }

  void Stop() override {
    base::MutexLock stop_lock(&stop_mu_);  // a second Stop waits for the first
    if (stopped_) return;
    const auto started = std::chrono::steady_clock::now();
    const auto deadline = started + kStopBudget;
    std::string steps;  // what took the time, for the last line
    auto step = [&](const char* what) {
      steps += std::string(steps.empty() ? "" : ", ") + what + " at " +
               std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                  std::chrono::steady_clock::now() - started)
                                  .count()) +
               " ms";
    };
    {
      base::MutexLock lock(&sweep_mu_);
      sweep_stop_ = true;
      sweep_cv_.NotifyAll();
    }
    if (sweeper_.joinable()) sweeper_.join();
    if (network_) network_->Stop();  // no probe ends (and reschedules) from here on
    step("sweeper joined");
    if (jobs_ && job_store_ != nullptr) {
      // Restartable: the jobs stay with their agents, which keep them for the lease and
      // reconcile with the next start of this launcher on the same --state-dir. Only worth a
      // warning when ranks run (a routine stop, or a start that failed, is not).
      if (jobs_->Counts().ranks_running > 0) {
        HVD_LOG(WARNING) << "stopping; running jobs continue if a launcher on "
                         << options_.state_dir << " is back within the agents' lease ("
                         << options_.lease.count() << " ms), otherwise their agents end them";
      } else {
        HVD_LOG(INFO) << "stopping; no rank is running";
      }
      jobs_->CloseWatches();
      gateway_service_->Close();
    } else if (jobs_) {
      jobs_->Shutdown("cancelled: the launcher is shutting down");
      // Agents report their ranks gone within the kill grace; waiting for that lets watchers
      // (hvdrun) see every rank end instead of a launcher that vanished mid-teardown.
      if (!jobs_->WaitRanksGone(std::min(options_.kill_grace + kDrainTimeout,
                                         Left(deadline, kDrainTimeout + kShutdownGrace)))) {
        HVD_LOG(WARNING) << "stopping with ranks not yet reported gone; their agents end them";
      }
      step("ranks waited for");
      jobs_->CloseWatches();
      gateway_service_->Drain(std::min(kDrainTimeout, Left(deadline, kShutdownGrace)));
      gateway_service_->Close();
      step("StopJob drained");
    }
    registry_.CloseAll();
    // Wake blocked rendezvous waits before the gRPC server waits for its calls to end.
    store_.Shutdown();
    // In-flight calls get kShutdownGrace (never past the deadline) to end, then are cancelled:
    // agents' streams, which StopJob has already reached, would otherwise hold it to the end.
    if (server_) {
      server_->Shutdown(std::chrono::system_clock::now() +
                        std::clamp(Left(deadline), std::chrono::milliseconds(50), kShutdownGrace));
      step("gRPC calls ended");
    }
    if (kv_server_) kv_server_->Stop();
    if (http_) http_->Stop();
    HVD_LOG(INFO) << "stopped in "
                  << std::chrono::duration_cast<std::chrono::milliseconds>(
                         std::chrono::steady_clock::now() - started)
                         .count()
                  << " ms (" << steps << ")";
    {
      base::MutexLock lock(&wait_mu_);
      stopped_ = true;
    }
    wait_cv_.NotifyAll();
  }

  void Wait() override {
    base::MutexLock lock(&wait_mu_);
    wait_cv_.Wait(lock, [&]() HVD_REQUIRES(wait_mu_) { return stopped_; });
  }

 private:
  // Declares agents that went silent LOST, failing the jobs that had ranks on them.
  void SweepLoop() {
    const auto period = std::clamp(options_.lease / 10, std::chrono::milliseconds(10),
                                   std::chrono::milliseconds(500));
    // The job table's version as last seen, when it last changed, and as last trimmed.
    uint64_t seen = 0, trimmed = 0;
    auto changed_at = std::chrono::steady_clock::now();
    base::MutexLock lock(&sweep_mu_);
    while (
        !sweep_cv_.WaitFor(lock, period, [&]() HVD_REQUIRES(sweep_mu_) { return sweep_stop_; })) {
      lock.Unlock();
      const auto now = std::chrono::steady_clock::now();
      gateway_service_->TouchParked();
      for (const AgentInfo& lost : registry_.ExpireLeases(now)) jobs_->OnAgentLost(lost);
      jobs_->Tick();
      // A big job's transient allocations (its StartRank messages, events, snapshots) stay in
      // the heap's arenas after they are freed, and count as RSS long after the job ended: give
      // them back once the table has been quiet for a second (a few ms, once per busy spell).
      const uint64_t version = jobs_->Snapshot()->version;
      if (version != seen) {
        seen = version;
        changed_at = now;
      } else if (version != trimmed && now - changed_at >= kTrimAfterQuiet) {
        malloc_trim(0);
        trimmed = version;
      }
      lock.Lock();
    }
  }

  const LauncherOptions options_;
  KvStore store_;
  std::unique_ptr<JobStore> job_store_;  // before jobs_, which writes to it
  AgentRegistry registry_;
  std::unique_ptr<NetworkCheck> network_;  // before jobs_, which points to it
  std::unique_ptr<JobManager> jobs_;
  std::atomic<JobManager*> jobs_ptr_{nullptr};  // read by rendezvous threads
  std::unique_ptr<KvServer> kv_server_;
  std::unique_ptr<LauncherService> launcher_service_;
  std::unique_ptr<AgentGatewayService> gateway_service_;
  std::unique_ptr<RendezvousService> rendezvous_service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<HttpServer> http_;
  std::string grpc_address_, rendezvous_address_;

  std::thread sweeper_;
  base::Mutex sweep_mu_;
  base::CondVar sweep_cv_;
  bool sweep_stop_ HVD_GUARDED_BY(sweep_mu_) = false;

  base::Mutex stop_mu_;
  base::Mutex wait_mu_;
  base::CondVar wait_cv_;
  bool stopped_ = false;  // written under wait_mu_ (and stop_mu_)
};

}  // namespace

Status Launcher::Start(const LauncherOptions& options, std::unique_ptr<Launcher>* out) {
  HVD_RETURN_IF_ERROR_CTX(ValidateOptions(options), "hvd-launcherd");
  auto launcher = std::make_unique<LauncherImpl>(options);
  Status s = launcher->Init();
  if (!s.ok()) return s.WithContext("hvd-launcherd");
  *out = std::move(launcher);
  return Status::OK();
}

}  // namespace hvd::launcherd
