#include "swarm.h"

#include <dirent.h>
#include <sys/resource.h>

#include <future>

#include "control/tls_grpc.h"
#include "control/token.h"
#include "hvd/v1/launcher.grpc.pb.h"

namespace hvd::bench {
namespace {

int ThreadsOfThisProcess() {
  DIR* d = opendir("/proc/self/task");
  if (d == nullptr) return -1;
  int n = 0;
  while (dirent* e = readdir(d)) n += e->d_name[0] != '.' ? 1 : 0;
  closedir(d);
  return n;
}

double CpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

}  // namespace

Swarm::Swarm(SwarmConfig config, int agents) {
  {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    cq_keeper_ = grpc::CreateCustomChannel(config.launcher,
                                           control::ChannelCredentialsFor(config.tls), args);
    auto stub = v1::Launcher::NewStub(cq_keeper_);
    grpc::ClientContext context;
    context.AddMetadata(control::kTokenMetadataKey, config.token);
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::ListAgentsRequest request;
    v1::ListAgentsResponse response;
    std::promise<void> done;
    // Its answer does not matter (the launcher may not be up yet): making the call takes the hold.
    stub->async()->ListAgents(&context, &request, &response,
                              [&done](grpc::Status) { done.set_value(); });
    done.get_future().wait();  // bounded by the deadline
  }
  shared_.config = std::move(config);
  shared_.agents = agents;
  agents_.reserve(static_cast<size_t>(agents));
  for (int i = 0; i < agents; ++i) agents_.push_back(std::make_unique<SimAgent>(&shared_, i));
}

Swarm::~Swarm() {
  if (!stopped_) Stop(std::chrono::seconds(10));
}

void Swarm::Start(std::chrono::milliseconds ramp) {
  shared_.start = std::chrono::steady_clock::now();
  const size_t n = agents_.size();
  for (size_t i = 0; i < n; ++i) {
    SimAgent* a = agents_[i].get();
    if (ramp.count() <= 0) {
      a->Connect();
    } else {
      const auto at = shared_.start + ramp * static_cast<int64_t>(i) / static_cast<int64_t>(n);
      shared_.timer.At(at, [a] { a->Connect(); });
    }
  }
}

int Swarm::Release(const std::string& job) {
  int n = 0;
  for (const auto& a : agents_) n += a->Release(job);
  return n;
}

nlohmann::json Swarm::Stats() const {
  const SwarmStats& s = shared_.stats;
  int live = 0, held = 0;
  for (const auto& a : agents_) {
    live += a->live_ranks();
    held += a->held_ranks();
  }
  nlohmann::json errors = nlohmann::json::object();
  for (const auto& [what, count] : s.Errors()) errors[what] = count;
  const auto elapsed = std::chrono::steady_clock::now() - shared_.start;
  return nlohmann::json{
      {"agents", shared_.agents},
      {"elapsed_ms", std::chrono::duration_cast<std::chrono::milliseconds>(elapsed).count()},
      {"connected", s.connected.load()},
      {"ever_registered", s.ever_registered.load()},
      {"all_registered_ms", s.all_registered_ms.load()},
      {"attempts", s.attempts.load()},
      {"acks", s.acks.load()},
      {"failed_attempts", s.failed_attempts.load()},
      {"stream_breaks", s.stream_breaks.load()},
      {"heartbeats", s.heartbeats.load()},
      {"rank_events", s.rank_events.load()},
      {"event_acks", s.event_acks.load()},
      {"starts", s.starts.load()},
      {"stops", s.stops.load()},
      {"master_ports", s.master_ports.load()},
      {"unexpected", s.unexpected.load()},
      {"lease_kills", s.lease_kills.load()},
      {"max_write_queue", s.max_write_queue.load()},
      {"live_ranks", live},
      {"held_ranks", held},
      {"timer_max_lag_ms", shared_.timer.max_lag_ms()},
      {"threads", ThreadsOfThisProcess()},
      {"cpu_s", CpuSeconds()},
      {"errors", errors}};
}

bool Swarm::Stop(std::chrono::milliseconds timeout) {
  stopped_ = true;
  shared_.stopping = true;
  shared_.timer.Stop();  // no heartbeat, deadline or reconnect runs after this
  for (const auto& a : agents_) a->Cancel();
  std::unique_lock<std::mutex> lock(shared_.streams_mu);
  return shared_.streams_cv.wait_for(lock, timeout, [&] { return shared_.live_streams == 0; });
}

}  // namespace hvd::bench
