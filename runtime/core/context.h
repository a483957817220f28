// The process-wide state behind the public API: who this rank is, its rendezvous store, its
// transport and its engine. Created by hvd::Init(), destroyed by hvd::Shutdown().
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "collectives/collectives.h"
#include "core/elastic.h"
#include "core/engine.h"
#include "hvd/hvd.h"
#include "rendezvous/store.h"
#include "stall/stall_reporter.h"
#include "transport/transport.h"

namespace hvd::runtime::core {

struct Topology {
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_size = 1;
  int cross_rank = 0;
  int cross_size = 1;
  bool homogeneous = true;  // every host runs the same number of ranks
};

class Context {
 public:
  // Reads the environment (overridden by `options`), meets the other ranks, connects the
  // transport and starts the engine. Errors name the variable, the store or the missing ranks.
  static Status Create(const InitOptions& options, std::unique_ptr<Context>* out);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  const Topology& topology() const { return topology_; }
  Engine& engine() { return *engine_; }

  // Coordinated stop of the engine, then the transport closes.
  Status Shutdown();

  // Elastic jobs (elastic.h): the generation this session joined, the newest one the launcher
  // published, and whether that one only lost workers. FailedPrecondition in a fixed job.
  Status ElasticGeneration(int64_t* joined, int64_t* latest, bool* only_removed);
  // hvd::ElasticCommitted (context_elastic.cc).
  Status ElasticCommitted();

 private:
  Context() = default;
  // `formed`: set when an elastic meeting formed (what fails after it is the connections).
  static Status CreateOnce(const InitOptions& options, std::unique_ptr<Context>* out, bool* formed);

  Topology topology_;
  std::unique_ptr<rendezvous::Store> base_store_;
  bool elastic_ = false;
  double shutdown_s_ = 10;                            // HVD_SHUTDOWN_TIMEOUT_SECONDS
  std::unique_ptr<rendezvous::Store> attempt_store_;  // elastic: where the membership is
  Membership membership_;                             // elastic: the one this session joined
  // elastic: when NoteCommitted last succeeded in this session, in steady-clock nanoseconds (0:
  // never). Atomic: commits may come from more than one of the program's threads.
  std::atomic<int64_t> committed_noted_ns_{0};
  std::unique_ptr<rendezvous::Store> store_;
  std::unique_ptr<stall::StallReporter> stall_reporter_;  // outlives the transport that uses it
  std::unique_ptr<transport::Transport> transport_;
  std::unique_ptr<Engine> engine_;
};

// The current process's engine counters; zeros when not initialized. For tests and benchmarks
// (internal: not exported from libhvd.so).
EngineStats CurrentEngineStats();

// Computes local and cross ranks from every rank's host name, as Horovod defines them:
// local_rank = order among ranks on the same host; cross_rank = index of this host among the
// hosts that have a rank with this local_rank (ordered by their lowest rank).
Topology ComputeTopology(int rank, const std::vector<std::string>& hosts);

// Connects this rank to its peers (shared memory on the same host, TCP across hosts, as the
// environment says; core/comm_setup.cc) and fills in *comm except idle_timeout. `wrap`, when
// given, decorates the connected transport before anything is built over it (the stall
// reporter's WatchWaits).
using TransportWrap =
    std::function<std::unique_ptr<transport::Transport>(std::unique_ptr<transport::Transport>)>;
Status ConnectComm(rendezvous::Store& store, int rank, int size,
                   const std::vector<std::string>& hosts, std::chrono::milliseconds start_timeout,
                   const TransportWrap& wrap, std::unique_ptr<transport::Transport>* transport,
                   collectives::Comm* comm);

// Whether GPU allreduces run hierarchically (NCCL within each host, the CPU ring across hosts):
// only where HVD_HIERARCHICAL_ALLREDUCE (or Horovod's name) is set to 1 in the environment, as
// Horovod's NCCL path: its default of 1 is for host tensors, and NCCL's own algorithms across
// hosts are usually faster where it has InfiniBand or RoCE (core/comm_setup.cc).
Status GpuHierarchicalRequested(bool* on);

// A transport for a job of one rank: there are no peers to talk to.
std::unique_ptr<transport::Transport> NewSelfTransport();

}  // namespace hvd::runtime::core
