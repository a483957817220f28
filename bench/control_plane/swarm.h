// The swarm: N SimAgents (sim_agent.h) sharing one timer thread and gRPC's callback threads,
// and the counters the benchmark reads.
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "sim_agent.h"

namespace hvd::bench {

class Swarm {
 public:
  Swarm(SwarmConfig config, int agents);
  ~Swarm();  // Stop() must have returned true (agents outlive their streams)
  Swarm(const Swarm&) = delete;
  Swarm& operator=(const Swarm&) = delete;

  // Every agent's first connection: all at once from this thread (ramp 0), or spread evenly over
  // `ramp` by the timer thread.
  void Start(std::chrono::milliseconds ramp);
  // Held ranks of `job` ("": of every job) exit; returns how many.
  int Release(const std::string& job);
  // The counters as one JSON object (README.md lists the fields).
  nlohmann::json Stats() const;
  // No more reconnects, every stream cancelled, and their ends awaited up to `timeout`. False
  // when some stream did not end: the caller must then exit without destroying the swarm.
  bool Stop(std::chrono::milliseconds timeout);

 private:
  // gRPC 1.51 runs this process's callback reactions on one shared completion queue that lives
  // while some channel holds it; agents replace their channels after failed attempts, and when
  // the count touched zero and a new queue was made, gRPC aborted ("assertion failed: prior >
  // 0" in grpc_cq_internal_unref). This channel takes a hold on the queue first (one ListAgents
  // call) and keeps it until every agent is gone (declared first: destroyed last).
  std::shared_ptr<grpc::Channel> cq_keeper_;
  SwarmShared shared_;
  std::vector<std::unique_ptr<SimAgent>> agents_;
  bool stopped_ = false;
};

}  // namespace hvd::bench
