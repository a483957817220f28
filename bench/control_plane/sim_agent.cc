#include "sim_agent.h"

#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <set>

#include "agent_stream.h"
#include "base/clock.h"
#include "control/grpc_util.h"
#include "control/tls_grpc.h"

namespace hvd::bench {
namespace {

using Ms = std::chrono::milliseconds;

constexpr Ms kInitialBackoff{100};  // agent/connection_policy.h's defaults
constexpr Ms kMaxBackoff{2000};
constexpr Ms kDefaultHeartbeat{1000};
constexpr size_t kMaxErrorKinds = 20;

// "--run-ms=250" -> 250; `def` when `arg` is not `name=`.
int64_t IntArg(const std::string& arg, const std::string& name, int64_t def) {
  const std::string prefix = name + "=";
  if (arg.compare(0, prefix.size(), prefix) != 0) return def;
  try {
    return std::stoll(arg.substr(prefix.size()));
  } catch (...) {
    return def;
  }
}

std::string HostName(const std::string& prefix, int index) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%05d", index);
  return prefix + buf;
}

}  // namespace

void SwarmStats::AddError(const std::string& what) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = errors_.find(what);
  if (it != errors_.end()) {
    ++it->second;
  } else if (errors_.size() < kMaxErrorKinds) {
    errors_[what] = 1;
  } else {
    ++errors_["(other messages)"];
  }
}

std::map<std::string, int64_t> SwarmStats::Errors() const {
  std::lock_guard<std::mutex> lock(mu_);
  return errors_;
}

SimAgent::SimAgent(SwarmShared* swarm, int index)
    : swarm_(swarm),
      index_(index),
      host_(HostName(swarm->config.host_prefix, index)),
      unreachable_since_(Clock::now()),
      jitter_(static_cast<uint32_t>(index) * 2654435761u + 1),
      incarnation_((static_cast<uint64_t>(base::WallMs()) << 20) ^ (static_cast<uint64_t>(index) + 1)) {}

void SimAgent::NumberLocked(v1::AgentMessage* m) {
  if (m->has_rank_event() && m->rank_event().seq() == 0) m->mutable_rank_event()->set_seq(next_seq_++);
}

SimAgent::~SimAgent() = default;

std::shared_ptr<grpc::Channel> SimAgent::NewChannel() const {
  // hvd-agent's arguments (control/grpc_util.h), so that connection timeouts and reconnects behave
  // as a real agent's do.
  grpc::ChannelArguments args = control::LauncherChannelArguments();
  // One TCP connection per agent, as separate hosts have: gRPC's global subchannel pool would
  // otherwise carry every agent's stream on one shared connection.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(swarm_->config.launcher,
                                   control::ChannelCredentialsFor(swarm_->config.tls), args);
}

v1::AgentInfo SimAgent::BuildInfoLocked() const {
  v1::AgentInfo info;
  info.set_agent_id(agent_id_);  // the previous id, so the launcher can reconcile
  info.set_host(host_);
  // Loopback, as every agent on one machine reports: the launcher then skips the network probe
  // (control/iface_choice.h), which the swarm does not simulate.
  info.set_advertise_addr("127.0.0.1");
  info.set_advertise_iface("lo");
  v1::NetInterface* lo = info.add_interfaces();
  lo->set_name("lo");
  lo->set_address("127.0.0.1");
  lo->set_prefix_len(8);
  lo->set_loopback(true);
  lo->set_up(true);
  info.set_slots(swarm_->config.slots);
  info.set_incarnation(incarnation_);
  info.set_gpus(0);
  info.set_pid(static_cast<int>(getpid()));
  info.set_version(HVD_SWARM_VERSION);
  info.set_slots_in_use(static_cast<int>(ranks_.size()));
  return info;
}

void SimAgent::Kick(const Kicks& kicks) {
  for (const auto& s : kicks) s->Kick();
}

void SimAgent::SendLocked(v1::AgentMessage m, bool keep_if_offline, Kicks* kicks) {
  if (m.has_rank_event()) ++swarm_->stats.rank_events;
  NumberLocked(&m);
  if (stream_ != nullptr && acked_) {
    if (stream_->Enqueue(std::move(m))) kicks->push_back(stream_);
  } else if (keep_if_offline) {
    pending_.push_back(std::move(m));
  }
}

v1::AgentMessage SimAgent::EventLocked(const Key& key, const Rank& r, v1::RankState state) const {
  v1::AgentMessage m;
  v1::RankEvent* e = m.mutable_rank_event();
  e->set_job_id(std::get<0>(key));
  e->set_attempt(std::get<1>(key));
  e->set_rank(std::get<2>(key));
  e->set_state(state);
  e->set_pid(r.pid);
  e->set_time_ms(base::WallMs());  // as hvd-agent stamps events
  if (state == v1::RANK_EXITED) e->set_exit_code(r.exit_code);
  if (state == v1::RANK_KILLED) e->set_signal(SIGTERM);
  return m;
}

void SimAgent::Connect() {
  if (swarm_->stopping) return;
  std::shared_ptr<AgentStream> s;
  v1::AgentMessage registration;
  uint64_t gen;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stream_ != nullptr) return;
    EndRanksIfLeaseExpiredLocked(Clock::now());
    if (channel_ == nullptr) channel_ = NewChannel();
    s = std::make_shared<AgentStream>(swarm_, this, channel_);
    stream_ = s;
    acked_ = false;
    gen = ++gen_;
    *registration.mutable_register_() = BuildInfoLocked();
  }
  ++swarm_->stats.attempts;
  swarm_->timer.After(swarm_->config.register_timeout, [this, gen] { RegisterDeadline(gen); });
  s->Start(registration);
}

void SimAgent::RegisterDeadline(uint64_t gen) {
  std::shared_ptr<AgentStream> s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (gen != gen_ || acked_ || stream_ == nullptr) return;
    s = stream_;
    swarm_->stats.AddError("no RegisterAck within " +
                           std::to_string(swarm_->config.register_timeout.count()) +
                           " ms (attempt cancelled)");
  }
  s->Cancel();
}

void SimAgent::OnAck(AgentStream* s, const v1::RegisterAck& ack) {
  Kicks kicks;
  uint64_t gen;
  bool first;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stream_.get() != s) return;
    acked_ = true;
    if (!ack.agent_id().empty()) agent_id_ = ack.agent_id();
    const int64_t hb =
        swarm_->config.heartbeat_ms > 0 ? swarm_->config.heartbeat_ms : ack.heartbeat_interval_ms();
    heartbeat_ = hb > 0 ? Ms(hb) : kDefaultHeartbeat;
    if (ack.lease_ms() > 0) lease_ = Ms(ack.lease_ms());
    backoff_ = kInitialBackoff;
    first = !registered_once_;
    registered_once_ = true;
    gen = gen_;
    // Events of ranks that ended while no stream was up (as hvd-agent's outbox keeps them).
    while (!pending_.empty()) {
      if (stream_->Enqueue(std::move(pending_.front()))) kicks.push_back(stream_);
      pending_.pop_front();
    }
  }
  ++swarm_->stats.acks;
  ++swarm_->stats.connected;
  if (first && ++swarm_->stats.ever_registered == swarm_->agents) {
    const auto elapsed = std::chrono::duration_cast<Ms>(Clock::now() - swarm_->start).count();
    swarm_->stats.all_registered_ms = elapsed;
    std::printf("SWARM all %d agents registered after %lld ms\n", swarm_->agents,
                static_cast<long long>(elapsed));
    std::fflush(stdout);
  }
  Kick(kicks);
  Heartbeat(gen);  // at once, as hvd-agent does: running_jobs lets the launcher reconcile
}

void SimAgent::Heartbeat(uint64_t gen) {
  Kicks kicks;
  Ms interval;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (gen != gen_ || !acked_ || stream_ == nullptr) return;
    v1::AgentMessage hb;
    hb.mutable_heartbeat()->set_time_ms(base::WallMs());
    std::set<std::string> jobs;
    for (const auto& [key, r] : ranks_) jobs.insert(std::get<0>(key));
    for (const std::string& j : jobs) hb.mutable_heartbeat()->add_running_jobs(j);
    SendLocked(std::move(hb), /*keep_if_offline=*/false, &kicks);
    interval = heartbeat_;
  }
  ++swarm_->stats.heartbeats;
  swarm_->timer.After(interval, [this, gen] { Heartbeat(gen); });
  Kick(kicks);
}

void SimAgent::OnCommand(AgentStream* s, const v1::LauncherMessage& msg) {
  Kicks kicks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stream_.get() != s) return;
    switch (msg.msg_case()) {
      case v1::LauncherMessage::kStart: {
        ++swarm_->stats.starts;
        const v1::StartRank& st = msg.start();
        const Key key{st.job_id(), st.attempt(), st.placement().rank()};
        Rank r;
        r.placement = st.placement();
        for (int i = 1; i < st.argv_size(); ++i) {
          const std::string& a = st.argv(i);
          if (a == "--hold") r.hold = true;
          r.run_ms = IntArg(a, "--run-ms", r.run_ms);
          r.exit_code = static_cast<int>(IntArg(a, "--exit-code", r.exit_code));
          r.start_ms = static_cast<int>(IntArg(a, "--start-ms", r.start_ms));
        }
        const int start_ms = r.start_ms;
        ranks_[key] = std::move(r);
        if (start_ms > 0) {
          swarm_->timer.After(Ms(start_ms), [this, key] { RankRunning(key); });
          break;
        }
        Rank& rank = ranks_[key];
        rank.running = true;
        rank.pid = static_cast<int>(swarm_->next_pid++);
        SendLocked(EventLocked(key, rank, v1::RANK_RUNNING), true, &kicks);
        if (!rank.hold && rank.run_ms <= 0) {
          SendLocked(EventLocked(key, rank, v1::RANK_EXITED), true, &kicks);
          ranks_.erase(key);
        } else if (!rank.hold) {
          const int pid = rank.pid;
          swarm_->timer.After(Ms(rank.run_ms), [this, key, pid] { RankExited(key, pid); });
        }
        break;
      }
      case v1::LauncherMessage::kStop: {
        ++swarm_->stats.stops;
        for (auto it = ranks_.begin(); it != ranks_.end();) {
          if (std::get<0>(it->first) != msg.stop().job_id()) {
            ++it;
            continue;
          }
          v1::AgentMessage m = EventLocked(it->first, it->second, v1::RANK_KILLED);
          if (msg.stop().signal() != 0) m.mutable_rank_event()->set_signal(msg.stop().signal());
          m.mutable_rank_event()->set_error("stopped by the launcher: " + msg.stop().reason());
          SendLocked(std::move(m), true, &kicks);
          it = ranks_.erase(it);
        }
        break;
      }
      case v1::LauncherMessage::kMasterPort: {
        ++swarm_->stats.master_ports;
        v1::AgentMessage m;
        m.mutable_master_port()->set_request_id(msg.master_port().request_id());
        m.mutable_master_port()->set_port(20000 + index_ % 40000);  // nothing binds it
        SendLocked(std::move(m), false, &kicks);
        break;
      }
      case v1::LauncherMessage::kEventAck:
        ++swarm_->stats.event_acks;
        break;
      case v1::LauncherMessage::kAck:
        if (msg.ack().lease_ms() > 0) lease_ = Ms(msg.ack().lease_ms());
        if (msg.ack().heartbeat_interval_ms() > 0 && swarm_->config.heartbeat_ms <= 0) {
          heartbeat_ = Ms(msg.ack().heartbeat_interval_ms());
        }
        break;
      default:  // network probes (loopback agents are never probed) and newer commands
        ++swarm_->stats.unexpected;
        break;
    }
  }
  Kick(kicks);
}

void SimAgent::RankRunning(const Key& key) {
  Kicks kicks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = ranks_.find(key);
    if (it == ranks_.end() || it->second.running) return;  // stopped meanwhile
    Rank& r = it->second;
    r.running = true;
    r.pid = static_cast<int>(swarm_->next_pid++);
    SendLocked(EventLocked(key, r, v1::RANK_RUNNING), true, &kicks);
    if (!r.hold) {
      const int pid = r.pid;
      swarm_->timer.After(Ms(r.run_ms), [this, key, pid] { RankExited(key, pid); });
    }
  }
  Kick(kicks);
}

void SimAgent::RankExited(const Key& key, int pid) {
  Kicks kicks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = ranks_.find(key);
    if (it == ranks_.end() || it->second.pid != pid) return;  // stopped meanwhile
    SendLocked(EventLocked(key, it->second, v1::RANK_EXITED), true, &kicks);
    ranks_.erase(it);
  }
  Kick(kicks);
}

int SimAgent::Release(const std::string& job) {
  Kicks kicks;
  int n = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = ranks_.begin(); it != ranks_.end();) {
      if (!it->second.hold || !it->second.running ||
          (!job.empty() && std::get<0>(it->first) != job)) {
        ++it;
        continue;
      }
      SendLocked(EventLocked(it->first, it->second, v1::RANK_EXITED), true, &kicks);
      it = ranks_.erase(it);
      ++n;
    }
  }
  Kick(kicks);
  return n;
}

void SimAgent::EndRanksIfLeaseExpiredLocked(Clock::time_point now) {
  if (ranks_.empty() || now - unreachable_since_ <= lease_) return;
  // hvd-agent ends its jobs once the launcher has been unreachable for longer than the lease.
  for (const auto& [key, r] : ranks_) {
    v1::AgentMessage m = EventLocked(key, r, v1::RANK_KILLED);
    m.mutable_rank_event()->set_error("ended by the simulated agent " + host_ +
                                      ": launcher unreachable for longer than the lease");
    NumberLocked(&m);
    pending_.push_back(std::move(m));
    ++swarm_->stats.rank_events;
    ++swarm_->stats.lease_kills;
  }
  ranks_.clear();
}

void SimAgent::OnStreamDone(AgentStream* s, const grpc::Status& status, bool acked) {
  Ms wait;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stream_.get() != s) return;
    // Rank events never written go to the next stream (heartbeats and port answers do not).
    for (v1::AgentMessage& m : s->TakeUnsent()) {
      if (m.has_rank_event()) pending_.push_back(std::move(m));
    }
    stream_.reset();
    acked_ = false;
    if (acked) {
      unreachable_since_ = Clock::now();
    } else {
      channel_ = NewChannel();  // as hvd-agent: a fresh channel dials at once next time
    }
    wait = backoff_;
    backoff_ = std::min(backoff_ * 2, kMaxBackoff);
    // Jitter: agents that lost the launcher together do not all return in the same millisecond.
    jitter_ = jitter_ * 1664525u + 1013904223u;
    wait = Ms(wait.count() / 2 + static_cast<long>(jitter_ % (wait.count() / 2 + 1)));
  }
  if (acked) --swarm_->stats.connected;
  if (swarm_->stopping) return;
  const std::string why = std::to_string(status.error_code()) + ": " + status.error_message();
  if (acked) {
    ++swarm_->stats.stream_breaks;
    swarm_->stats.AddError("stream broke: " + why);
  } else {
    ++swarm_->stats.failed_attempts;
    if (status.error_code() != grpc::StatusCode::CANCELLED) {
      swarm_->stats.AddError("attempt failed: " + why);
    }
  }
  swarm_->timer.After(wait, [this] { Connect(); });
}

void SimAgent::Cancel() {
  std::shared_ptr<AgentStream> s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    s = stream_;
  }
  if (s != nullptr) s->Cancel();
}

int SimAgent::live_ranks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(ranks_.size());
}

int SimAgent::held_ranks() const {
  std::lock_guard<std::mutex> lock(mu_);
  int n = 0;
  for (const auto& [key, r] : ranks_) n += r.hold ? 1 : 0;
  return n;
}

}  // namespace hvd::bench
