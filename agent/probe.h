// The agent's part of the network probe the launcher runs before a job starts
// (hvd.v1.NetworkProbe): LISTEN opens a short-lived listener and reports its port, DIAL dials the
// ring successor's addresses and reports each outcome, DONE closes the listener. Each step runs
// on its own thread so the launcher stream is never blocked; every listener closes by itself at
// its deadline and every dial is bounded, so nothing outlives a probe by more than its timeout.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/mutex.h"
#include "hvd/v1/agent.pb.h"

namespace hvd::agent {

class Prober {
 public:
  using Send = std::function<void(hvd::v1::AgentMessage)>;
  using AgentId = std::function<std::string()>;

  // `send` queues a message for the launcher; `agent_id` is this agent's current id.
  Prober(Send send, AgentId agent_id) : send_(std::move(send)), agent_id_(std::move(agent_id)) {}
  ~Prober();  // closes every listener and joins every thread

  void Handle(const hvd::v1::NetworkProbe& probe);

 private:
  // A listener's or a dialer's thread; `done` once it has nothing left to do.
  struct Task {
    std::string probe_id;
    int listen_fd = -1;  // listeners only
    int stop_fd = -1;    // listeners only: an eventfd, readable once it must close
    std::thread thread;
    std::atomic<bool> done{false};
  };

  void Listen(const hvd::v1::NetworkProbe& probe);
  void Dial(const hvd::v1::NetworkProbe& probe);
  void Report(const hvd::v1::NetworkProbeReport& report);
  // Joins and frees finished tasks.
  void ReapLocked() HVD_REQUIRES(mu_);

  const Send send_;
  const AgentId agent_id_;
  base::Mutex mu_;
  std::vector<std::unique_ptr<Task>> tasks_ HVD_GUARDED_BY(mu_);
};

}  // namespace hvd::agent
