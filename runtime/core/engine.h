// The engine: one background thread per process that turns submitted operations into
// collectives, in lockstep with every other rank.
//
// One cycle (every HVD_CYCLE_TIME), on every rank:
//   1. take newly submitted operations; look each up in the response cache:
//        hit   - the key was negotiated before with these specs: set its slot's bit;
//        stale - the cached specs differ from ours: set the slot's invalidate bit;
//        miss  - negotiate through the coordinator (the slow path).
//   2. AND-allreduce one small vector: [flags | hit bits | ~invalidate bits]. Flags say whether
//      any rank has requests for the slow path and whether any rank is shutting down.
//   3. erase invalidated slots everywhere; run the slots whose bit survived on every rank, in slot
//      order. At steady state this is the whole cycle: no gather through rank 0.
//   4. if any rank has uncached requests: gather request lists to rank 0, whose coordinator
//      decides (ready keys, mismatches, stalls, join) and broadcasts a response list that every
//      rank runs and adds to its cache in the same order.
// A transport failure fails every pending operation with the error (naming the peer) and stops
// the engine; later submissions fail at once with the same error.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "collectives/collectives.h"
#include "common/thread_annotations.h"
#include "core/executor.h"
#include "core/operation.h"
#include "fusion/coordinator.h"
#include "fusion/response_cache.h"
#include "stall/stall_reporter.h"
#include "timeline/timeline.h"

namespace hvd::runtime::core {

struct EngineOptions {
  std::chrono::microseconds cycle_time{1000};
  fusion::FusionLimits fusion{128ll << 20, 0};
  uint32_t cache_capacity = 1024;
  double stall_check_seconds = 60;
  double stall_shutdown_seconds = 0;
  // Rank 0 tells it the coordinator's oldest stall (not owned; may be null).
  stall::StallReporter* stall_reporter = nullptr;
};

// Counters for tests, benchmarks and status reports.
struct EngineStats {
  uint64_t cycles = 0;
  uint64_t slow_path_cycles = 0;       // cycles that gathered requests through rank 0
  uint64_t cache_hits = 0;             // keys run from the response cache
  uint64_t negotiated = 0;             // keys run from coordinator responses
  uint64_t allreduce_collectives = 0;  // ring allreduces run; a fused batch counts once
};

class Engine {
 public:
  // `comm.transport` must outlive the engine. `timeline` may be null.
  Engine(collectives::Comm comm, EngineOptions options,
         std::unique_ptr<timeline::Timeline> timeline);
  ~Engine();  // Stop()s if still running
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  void Start();

  // Thread-safe. Fails the operation at once when its key is already in flight on this rank or
  // the engine has stopped.
  void Enqueue(std::shared_ptr<internal::Operation> op);

  // Asks every rank to stop (they stop together at the next cycle), waits up to `grace` for
  // that, then aborts the transport. Pending operations fail with Aborted. Idempotent.
  Status Stop(std::chrono::milliseconds grace);

  EngineStats stats() const;

 private:
  enum class State { kNew, kCached, kSent };
  struct Pending {
    std::shared_ptr<internal::Operation> op;
    State state = State::kNew;
    uint32_t slot = 0;
    uint64_t generation = 0;  // cache generation when `slot` was looked up
    std::chrono::steady_clock::time_point enqueued;
  };

  void Loop();
  // One cycle; false when the engine must stop.
  bool Cycle();
  Status RunCycle(bool* stop);
  void Classify(std::vector<uint32_t>* invalidate);
  void RefreshAfterCacheChange();
  Status SlowPath();
  Status Run(const std::vector<fusion::Response>& responses);
  void Finish(const std::string& key, const Status& status);
  // Fails every queued and pending operation with `status`; later submissions get `later` (the
  // same status when OK).
  void FailAll(const Status& status, const Status& later = Status::OK());
  bool joined_self() const { return joined_.count(comm_.rank()) > 0; }

  const collectives::Comm comm_;
  const EngineOptions options_;
  std::unique_ptr<timeline::Timeline> timeline_;
  Executor executor_;

  std::mutex mu_;
  std::condition_variable stopped_cv_;
  // The loop sleeps on this between cycles. While the engine is idle (its last cycle left
  // nothing pending), a submission wakes it at once instead of at the next HVD_CYCLE_TIME tick:
  // a lone synchronous operation then costs a negotiation, not up to a whole cycle time. Busy,
  // the engine keeps its cadence, which is what lets tensors of one backward pass fuse.
  std::condition_variable wake_cv_;
  bool idle_ GUARDED_BY(mu_) = false;
  std::vector<std::shared_ptr<internal::Operation>> queue_ GUARDED_BY(mu_);
  std::set<std::string> in_flight_ GUARDED_BY(mu_);
  bool stop_requested_ GUARDED_BY(mu_) = false;
  bool stopped_ GUARDED_BY(mu_) = false;
  bool stopped_by_peer_ GUARDED_BY(mu_) = false;  // another rank's Shutdown stopped this engine
  Status final_status_ GUARDED_BY(mu_);

  // Background thread only.
  std::map<std::string, Pending> pending_;
  fusion::ResponseCache cache_;
  std::unique_ptr<fusion::Coordinator> coordinator_;  // rank 0
  std::set<int> joined_;
  std::chrono::steady_clock::time_point next_stall_report_;
  std::thread thread_;
  mutable std::mutex stats_mu_;
  EngineStats stats_ GUARDED_BY(stats_mu_);
};

}  // namespace hvd::runtime::core
