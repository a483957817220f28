// AgentImpl: two threads around a Workers set and an Outbox.
//   connector: opens the launcher stream (with backoff), registers, and reads commands until the
//              stream breaks; StartRank and StopJob go to Workers.
//   writer:    the only thread that writes to the stream: heartbeats, then rank events and output
//              batches from the Outbox; while disconnected it ends every job once the lease runs
//              out.
#include "agent/agent.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>

#include "agent/connection_policy.h"
#include "agent/gpu_inventory.h"
#include "agent/host_info.h"
#include "agent/interfaces.h"
#include "agent/launcher_client.h"
#include "agent/master_port.h"
#include "agent/outbox.h"
#include "agent/previous_run.h"
#include "agent/probe.h"
#include "agent/state_dir.h"
#include "agent/stdin_feed.h"
#include "agent/workers.h"
#include "base/clock.h"
#include "base/logging.h"
#include "base/mutex.h"
#include "base/net.h"
#include "control/grpc_util.h"
#include "control/host_spec.h"

#ifndef HVD_AGENT_VERSION
#define HVD_AGENT_VERSION "dev"
#endif

namespace hvd::agent {
namespace {

using Clock = std::chrono::steady_clock;
using Ms = std::chrono::milliseconds;

// hvd-worker-wrapper installed beside this executable (or, in the build tree, in agent/ beside
// cli/ where hvdrun lives); else this executable, which runs the wrapper as well but loads every
// library of the agent first.
std::string DefaultWrapperPath() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n > 0) {
    const std::string self(buf, static_cast<size_t>(n));
    const std::string dir = self.substr(0, self.rfind('/'));
    for (const std::string& candidate :
         {dir + "/hvd-worker-wrapper", dir + "/../agent/hvd-worker-wrapper"}) {
      if (access(candidate.c_str(), X_OK) == 0) return candidate;
    }
  }
  return "/proc/self/exe";
}

constexpr Ms kRegisterTimeout{10000};
constexpr Ms kDefaultHeartbeat{1000};
// SIGTERM -> SIGKILL when the agent itself ends jobs: on Stop() and when the lease runs out (the
// launcher's StopJob brings its own grace).
constexpr Ms kOwnStopGrace{5000};
// On Stop(), how long the final rank events may take to reach a connected launcher.
constexpr Ms kFinalFlush{2000};
// On Stop(), after that: how long the goodbye may take to be written, and then the launcher to
// end the call (up to twice this in all; a launcher that stopped reading is cancelled then).
constexpr Ms kGoodbyeWait{500};
constexpr Ms kLeaseCheck{100};
constexpr std::chrono::seconds kRepeatErrorLog{30};

class AgentImpl : public Agent {
 public:
  AgentImpl(AgentOptions options, WorkersOptions workers, int slots, std::string host,
            std::string agent_id, std::vector<control::InterfaceSelector> selectors)
      : options_(std::move(options)),
        selectors_(std::move(selectors)),
        gpus_(workers.gpus),
        slots_(slots),
        host_(std::move(host)),
        channel_(control::NewChannel(options_.launcher, options_.tls)),
        cgroups_(workers.cgroups),
        workers_(&outbox_, std::move(workers)),
        prober_([this](hvd::v1::AgentMessage m) { outbox_.AddMessage(std::move(m)); },
                [this] {
                  base::MutexLock lock(&mu_);
                  return agent_id_;
                }),
        agent_id_(std::move(agent_id)),
        policy_(ConnectionPolicy::Config{}, Clock::now()) {}
  ~AgentImpl() override { Stop(); }

  void Begin() {
    HVD_LOG(INFO) << "hvd-agent " << HVD_AGENT_VERSION << " on " << host_ << ": " << slots_
                  << " slot(s), " << gpus_.size() << " GPU(s); launcher " << options_.launcher;
    writer_ = std::thread(&AgentImpl::WriterLoop, this);
    connector_ = std::thread(&AgentImpl::ConnectLoop, this);
  }

  void Stop() override {
    {
      base::MutexLock lock(&mu_);
      if (stop_started_) {
        cv_.Wait(lock, [&]() HVD_REQUIRES(mu_) { return stopped_; });
        return;
      }
      stop_started_ = true;
    }
    cv_.NotifyAll();  // the connector's backoff sleep
    // Every process first, so the launcher hears each rank's end if it is still there.
    workers_.Shutdown(kOwnStopGrace, "hvd-agent on " + host_ + " was stopped");
    if (cgroups_ != nullptr) cgroups_->RemoveAll();
    const auto flush_until = Clock::now() + kFinalFlush;
    while (!outbox_.empty() && connected() && Clock::now() < flush_until) {
      outbox_.Wake();
      std::this_thread::sleep_for(Ms(10));
    }
    // Then the goodbye (the writer's, after whatever it still sends): the launcher lists this
    // agent STOPPED at once instead of LOST at its lease, with a warning, as if it had crashed.
    {
      base::MutexLock lock(&mu_);
      goodbye_due_ = true;
    }
    outbox_.Wake();
    {
      base::MutexLock lock(&mu_);
      cv_.WaitFor(lock, kGoodbyeWait,
                  [&]() HVD_REQUIRES(mu_) { return goodbye_sent_ || stream_ == nullptr; });
      // The launcher ends the call once it has read the goodbye (the connector then drops the
      // stream): only a launcher that does not is cancelled below.
      if (goodbye_sent_) {
        cv_.WaitFor(lock, kGoodbyeWait, [&]() HVD_REQUIRES(mu_) { return stream_ == nullptr; });
      }
      writer_stop_ = true;
      if (stream_ != nullptr) stream_->Cancel();
      if (opening_ != nullptr) opening_->Cancel();
    }
    outbox_.Wake();
    writer_.join();
    connector_.join();
    HVD_LOG(INFO) << "hvd-agent stopped";
    {
      base::MutexLock lock(&mu_);
      stopped_ = true;
    }
    cv_.NotifyAll();
  }

  void Wait() override {
    base::MutexLock lock(&mu_);
    cv_.Wait(lock, [&]() HVD_REQUIRES(mu_) { return stopped_; });
  }

 private:
  bool stopping() const {
    base::MutexLock lock(&mu_);
    return stop_started_;
  }
  bool connected() const {
    base::MutexLock lock(&mu_);
    return stream_ != nullptr;
  }

  hvd::v1::AgentInfo BuildInfo() {
    hvd::v1::AgentInfo info;
    {
      base::MutexLock lock(&mu_);
      info.set_agent_id(agent_id_);  // the previous id, so the launcher can reconcile
    }
    info.set_host(host_);
    DescribeHostNetwork(options_.launcher, options_.advertise_addr, selectors_, host_, &info);
    info.set_slots(slots_);
    info.set_gpus(static_cast<int>(gpus_.size()));
    info.set_pid(static_cast<int>(getpid()));
    info.set_version(HVD_AGENT_VERSION);
    info.set_slots_in_use(workers_.live_count());
    info.set_incarnation(incarnation_);  // RankEvent.seq restarts with the process
    return info;
  }

  void ConnectLoop() {
    std::string last_error;
    auto last_error_log = Clock::time_point::min();
    std::minstd_rand jitter(static_cast<unsigned>(getpid()));
    while (!stopping()) {
      auto stream = std::make_shared<LauncherStream>(channel_, options_.launcher, options_.token);
      {
        base::MutexLock lock(&mu_);
        if (stop_started_) break;
        opening_ = stream;
      }
      hvd::v1::RegisterAck ack;
      Status s = stream->Register(BuildInfo(), kRegisterTimeout, &ack);
      {
        base::MutexLock lock(&mu_);
        opening_ = nullptr;
      }
      if (s.ok()) {
        OnRegistered(ack, stream);
        last_error.clear();
        ReadCommands(*stream);
        s = stream->Finish();
        Ms lease;
        {
          base::MutexLock lock(&mu_);
          stream_ = nullptr;
          policy_.Disconnected(Clock::now());
          lease = policy_.lease();
        }
        cv_.NotifyAll();  // Stop() waits for the stream's end after its goodbye
        if (stopping()) break;
        HVD_LOG(WARNING) << "lost the stream to the " << s.message()
                         << "; reconnecting (jobs on this host end if it stays unreachable for "
                         << base::SecondsText(lease) << ")";
      } else {
        {
          base::MutexLock lock(&mu_);
          policy_.Disconnected(Clock::now());
        }
        // A fresh channel dials at once on the next attempt: a failed one waits out gRPC's own
        // reconnect backoff first, which can outlast a restarted launcher's patience.
        channel_ = control::NewChannel(options_.launcher, options_.tls);
        if (stopping()) break;
        const auto now = Clock::now();
        // The first failure of an outage, then one line every kRepeatErrorLog (gRPC's text
        // varies between attempts; it must not flood the log).
        if (last_error.empty() || now - last_error_log >= kRepeatErrorLog) {
          const std::string hint = control::TlsFailureHint(s.message(), options_.tls.enabled());
          HVD_LOG(WARNING) << "cannot register with the launcher: " << s.message()
                           << (hint.empty() ? "" : "; " + hint) << "; retrying";
          last_error = s.message();
          last_error_log = now;
        }
      }
      base::MutexLock lock(&mu_);
      Ms wait = policy_.NextBackoff();
      // Jitter: a restarted launcher is not hit by every agent in the same millisecond.
      wait = Ms(wait.count() / 2 + static_cast<long>(jitter() % (wait.count() / 2 + 1)));
      cv_.WaitFor(lock, wait, [&]() HVD_REQUIRES(mu_) { return stop_started_; });
    }
  }

  void OnRegistered(const hvd::v1::RegisterAck& ack, std::shared_ptr<LauncherStream> stream) {
    Ms outage;
    bool first;
    std::string previous_id;
    {
      base::MutexLock lock(&mu_);
      outage = policy_.UnreachableFor(Clock::now());
      first = !registered_once_;
      registered_once_ = true;
      policy_.Connected(Ms(ack.lease_ms()));
      heartbeat_interval_ =
          ack.heartbeat_interval_ms() > 0 ? Ms(ack.heartbeat_interval_ms()) : kDefaultHeartbeat;
      next_heartbeat_ = Clock::now();  // at once: running_jobs lets the launcher reconcile
      previous_id = agent_id_;
      if (!ack.agent_id().empty()) agent_id_ = ack.agent_id();
      // Before the writer sees the stream (under mu_, as its Take is): what the old stream may
      // have lost goes first.
      outbox_.Reconnected(ack.acks_rank_events());
      stream_ = std::move(stream);
      // Stop() may have passed the point where it cancels stream_ while this one registered.
      if (writer_stop_) stream_->Cancel();
    }
    if (first) {
      HVD_LOG(INFO) << "registered with the launcher at " << options_.launcher << " as agent "
                    << ack.agent_id();
    } else {
      // Good news (the loss was the warning): INFO, so a recovered outage reads as resolved.
      HVD_LOG(INFO) << "re-registered with the launcher at " << options_.launcher << " as agent "
                    << ack.agent_id() << " after " << base::SecondsText(outage) << " unreachable; "
                    << workers_.live_count() << " rank(s) still running here";
    }
    if (ack.agent_id() != previous_id) SaveAgentId(options_.state_dir, ack.agent_id());
    outbox_.Wake();
  }

  // StopJob, or StopRanks (`ranks` non-null): to Workers, and said in the log.
  void ApplyStop(const std::string& job, const std::string& reason, int64_t grace_ms, int signal,
                 const hvd::v1::StopRanks* ranks) {
    const std::string why = "stopped by the launcher: " + reason;
    const int n =
        ranks == nullptr
            ? workers_.StopJob(job, Ms(grace_ms), why, signal)
            : workers_.StopRanks(job, ranks->attempt(),
                                 std::vector<int>(ranks->ranks().begin(), ranks->ranks().end()),
                                 Ms(grace_ms), why, signal);
    HVD_LOG(INFO) << "stopping job " << job << " (" << reason << "): " << n << " rank(s) here"
                  << (ranks == nullptr ? "" : " of those named") << ", signal "
                  << (signal ? signal : SIGTERM) << ", SIGKILL after "
                  << base::SecondsText(Ms(grace_ms));
  }

  void ReadCommands(LauncherStream& stream) {
    hvd::v1::LauncherMessage msg;
    while (stream.Read(&msg)) {
      switch (msg.msg_case()) {
        case hvd::v1::LauncherMessage::kStart:
          workers_.StartRankAsync(RankSpecFromProto(msg.start()));
          break;
        case hvd::v1::LauncherMessage::kStop: {
          const auto& stop = msg.stop();
          ApplyStop(stop.job_id(), stop.reason(), stop.grace_ms(), stop.signal(), nullptr);
          break;
        }
        case hvd::v1::LauncherMessage::kStopRanks: {  // some ranks of one attempt
          const auto& stop = msg.stop_ranks();
          ApplyStop(stop.job_id(), stop.reason(), stop.grace_ms(), stop.signal(), &stop);
          break;
        }
        case hvd::v1::LauncherMessage::kStackDump:  // a stalled rank's stacks (stack_dump.h)
          workers_.DumpStacks(msg.stack_dump().job_id(), msg.stack_dump().attempt(),
                              {msg.stack_dump().ranks().begin(), msg.stack_dump().ranks().end()},
                              msg.stack_dump().signal(), msg.stack_dump().reason());
          break;
        case hvd::v1::LauncherMessage::kProbe:  // the network check before a job (probe.h)
          prober_.Handle(msg.probe());
          break;
        case hvd::v1::LauncherMessage::kMasterPort:  // MASTER_PORT before a job (master_port.h)
          outbox_.AddMessage(master_ports_.Answer(msg.master_port()));
          break;
        case hvd::v1::LauncherMessage::kEventAck:  // applied: no resend needed (outbox.h)
          outbox_.Ack(msg.event_ack().through_seq());
          break;
        case hvd::v1::LauncherMessage::kAck: {
          base::MutexLock lock(&mu_);
          policy_.Connected(Ms(msg.ack().lease_ms()));
          if (msg.ack().heartbeat_interval_ms() > 0) {
            heartbeat_interval_ = Ms(msg.ack().heartbeat_interval_ms());
          }
          break;
        }
        default:
          break;  // a newer launcher's command: ignored, not fatal
      }
    }
  }

  void WriterLoop() {
    while (true) {
      const auto now = Clock::now();
      std::shared_ptr<LauncherStream> stream;
      bool heartbeat = false;
      auto wake_at = now + kLeaseCheck;
      {
        base::MutexLock lock(&mu_);
        if (writer_stop_) break;
        // After the goodbye nothing more: a write after the half-close fails, and the cancel
        // that follows a failed write could discard the goodbye itself.
        stream = goodbye_sent_ ? nullptr : stream_;
        if (stream != nullptr) {
          heartbeat = now >= next_heartbeat_;
          if (heartbeat) next_heartbeat_ = now + heartbeat_interval_;
          wake_at = next_heartbeat_;
        }
      }
      if (stream == nullptr) {
        EndJobsIfLeaseExpired(now);
      } else {
        // Running jobs are read before the outbox is flushed, and sent after it: a rank that
        // ended is then either still listed or its end is already on the stream. The launcher
        // takes a job missing from the list as gone, which must not overtake its exit report.
        std::vector<std::string> running;
        if (heartbeat) running = workers_.RunningJobs();
        std::vector<hvd::v1::AgentMessage> msgs;
        {
          // A Take for a stream already replaced would give the new one's resends to the old.
          base::MutexLock lock(&mu_);
          if (stream_ == stream) msgs = outbox_.Take(now, heartbeat);
          heartbeat &= stream_ == stream;
        }
        bool ok = true;
        for (size_t i = 0; i < msgs.size() && ok; ++i) {
          if (!stream->Write(msgs[i])) {
            // Kept for the next stream; the launcher tolerates a repeated event or batch.
            outbox_.PutBack(std::vector<hvd::v1::AgentMessage>(msgs.begin() + i, msgs.end()));
            stream->Cancel();
            ok = false;
          }
        }
        if (heartbeat && ok) {
          hvd::v1::AgentMessage hb;
          hb.mutable_heartbeat()->set_time_ms(base::WallMs());
          for (const std::string& job : running) hb.mutable_heartbeat()->add_running_jobs(job);
          if (!stream->Write(hb)) stream->Cancel();  // the connector notices and reconnects
        }
        bool goodbye;
        {
          base::MutexLock lock(&mu_);
          goodbye = goodbye_due_ && !goodbye_sent_ && stream_ == stream && ok;
        }
        if (goodbye) {
          hvd::v1::AgentMessage bye;
          bye.mutable_goodbye()->set_reason("hvd-agent on " + host_ + " was stopped");
          // Then half-closed, not cancelled: a cancel may discard what was written just before.
          // The launcher ends the call once it has read everything; Stop() waits for that.
          if (stream->Write(bye)) stream->WritesDone();
          {
            base::MutexLock lock(&mu_);
            goodbye_sent_ = true;
          }
          cv_.NotifyAll();
        }
      }
      workers_.Reap();
      // Without a stream nothing can be flushed: waiting for what is due would spin while an
      // exit report waits for the launcher. The connector wakes this loop once it has one.
      if (stream == nullptr) {
        outbox_.WaitWoken(wake_at);
      } else {
        outbox_.WaitDue(wake_at);
      }
    }
  }

  void EndJobsIfLeaseExpired(Clock::time_point now) {
    Ms unreachable, lease;
    {
      base::MutexLock lock(&mu_);
      if (!policy_.LeaseExpired(now)) return;
      unreachable = policy_.UnreachableFor(now);
      lease = policy_.lease();
    }
    for (const auto& [job, ranks] : workers_.UnstoppedJobs()) {
      HVD_LOG(ERROR) << "launcher at " << options_.launcher << " unreachable for "
                     << base::SecondsText(unreachable) << " (lease " << base::SecondsText(lease)
                     << "); ending job " << job << " (" << ranks << " rank(s) on this host)";
      workers_.StopJob(job, kOwnStopGrace,
                       "ended by hvd-agent on " + host_ + ": launcher at " + options_.launcher +
                           " unreachable for " + base::SecondsText(unreachable));
    }
  }

  const AgentOptions options_;
  const std::vector<control::InterfaceSelector> selectors_;
  const std::vector<std::string> gpus_;
  const int slots_;
  const std::string host_;
  std::shared_ptr<grpc::Channel> channel_;  // the connector thread's
  const std::shared_ptr<const CgroupTree> cgroups_;
  Outbox outbox_;
  Workers workers_;
  Prober prober_;
  MasterPortPicker master_ports_;
  // AgentInfo.incarnation: random and odd, so never 0 (which means an agent without seqs).
  const uint64_t incarnation_ =
      (uint64_t{std::random_device{}()} << 32 | std::random_device{}()) | 1;

  mutable base::Mutex mu_;
  base::CondVar cv_;
  std::string agent_id_ HVD_GUARDED_BY(mu_);
  ConnectionPolicy policy_ HVD_GUARDED_BY(mu_);
  // Registered; what the writer writes to.
  std::shared_ptr<LauncherStream> stream_ HVD_GUARDED_BY(mu_);
  // Being registered; Stop() cancels it.
  std::shared_ptr<LauncherStream> opening_ HVD_GUARDED_BY(mu_);
  bool registered_once_ HVD_GUARDED_BY(mu_) = false;
  Ms heartbeat_interval_ HVD_GUARDED_BY(mu_) = kDefaultHeartbeat;
  Clock::time_point next_heartbeat_ HVD_GUARDED_BY(mu_);
  bool stop_started_ HVD_GUARDED_BY(mu_) = false;
  bool writer_stop_ HVD_GUARDED_BY(mu_) = false;
  bool goodbye_due_ HVD_GUARDED_BY(mu_) = false;  // Stop() asks the writer to say goodbye
  bool goodbye_sent_ HVD_GUARDED_BY(mu_) = false;
  bool stopped_ HVD_GUARDED_BY(mu_) = false;
  std::thread writer_;
  std::thread connector_;
};

}  // namespace

Status Agent::Start(const AgentOptions& options, std::unique_ptr<Agent>* out) {
  if (options.launcher.empty()) {
    return InvalidArgument("no launcher address: pass --launcher HOST:PORT (or set HVD_LAUNCHER)");
  }
  base::HostPort launcher;
  HVD_RETURN_IF_ERROR_CTX(base::ParseHostPort(options.launcher, &launcher), "--launcher");
  if (options.token.empty()) {
    return InvalidArgument("no cluster token: pass --token-file (or set HVD_TOKEN_FILE)");
  }
  if (options.slots == 0 || options.slots < -1) {
    return InvalidArgument("--slots must be at least 1 (or -1: one per GPU), got " +
                           std::to_string(options.slots));
  }
  // Ranks of a TLS launcher get the CA and CRLs in their environment (HVD_RENDEZVOUS_CA, _CRL):
  // past Linux's 128 KiB per variable every exec would fail with E2BIG, far from the cause.
  constexpr size_t kMaxPemInEnv = 96 << 10;
  for (const auto& [flag, pem] :
       {std::pair{"--tls-ca", &options.tls.ca_pem}, std::pair{"--tls-crl", &options.tls.crl_pem}}) {
    if (pem->size() > kMaxPemInEnv) {
      return InvalidArgument(std::string(flag) + " holds " + std::to_string(pem->size()) +
                             " bytes; ranks get it in an environment variable (at most " +
                             std::to_string(kMaxPemInEnv >> 10) +
                             " KiB here): give the cluster's CA and its CRL alone, not a bundle");
    }
  }
  WorkersOptions workers;
  const GpuInventory gpus = DiscoverGpus();
  HVD_LOG(INFO) << gpus.Describe();
  workers.gpus = GpuIds(static_cast<int>(gpus.gpus.size()), std::getenv("CUDA_VISIBLE_DEVICES"));
  const int slots =
      options.slots > 0 ? options.slots : std::max(1, static_cast<int>(workers.gpus.size()));
  std::string agent_id;
  HVD_RETURN_IF_ERROR(LoadAgentId(options.state_dir, &agent_id));
  workers.wrapper = options.wrapper_path.empty() ? DefaultWrapperPath() : options.wrapper_path;
  workers.stdin_feed = [launcher = options.launcher, token = options.token, tls = options.tls](
                           const RankSpec& rank, int fd) {
    return StartLauncherStdinFeed(launcher, token, rank.job_id, rank.attempt, rank.rank, fd, tls);
  };
  HVD_LOG(INFO) << "workers start through " << workers.wrapper;
  const std::string host_name = options.host.empty() ? base::LocalHostName() : options.host;
  // The launcher refuses such a name at every registration: said once, here, instead.
  if (Status hs = control::CheckHostName(host_name); !hs.ok()) {
    return InvalidArgument(
        options.host.empty()
            ? "this machine's host name: " + hs.message() +
                  "; name the host with hvd-agent --host NAME (hvdrun: -H NAME:SLOTS)"
            : "--host: " + hs.message());
  }
  if (!options.advertise_addr.empty()) {
    HVD_RETURN_IF_ERROR_CTX(control::CheckAddress(options.advertise_addr), "--advertise-addr");
  }
  workers.allow_run_as_root = options.allow_run_as_root;
  workers.rendezvous_ca_pem = options.tls.ca_pem;
  workers.rendezvous_crl_pem = options.tls.crl_pem;
  workers.host = host_name;
  std::vector<control::InterfaceSelector> selectors;
  HVD_RETURN_IF_ERROR(ParseAgentSelectors(options.network_interfaces, host_name, &selectors));
  HVD_RETURN_IF_ERROR(CleanUpPreviousRun(options, &workers));
  auto impl = std::make_unique<AgentImpl>(options, std::move(workers), slots, host_name, agent_id,
                                          std::move(selectors));
  impl->Begin();
  *out = std::move(impl);
  return Status::OK();
}

}  // namespace hvd::agent
