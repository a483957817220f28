// SetRunner: the negotiation state of one process set on one rank, driven by the engine's
// background thread (core/engine.h). Each cycle, every member of the set runs Cycle() in
// lockstep with the others:
//   1. look up pending requests in the response cache:
//        hit   - the key was negotiated before with these specs: set its slot's bit;
//        stale - the cached specs differ from ours: set the slot's invalidate bit;
//        miss  - negotiate through the coordinator (the slow path).
//   2. AND-allreduce one small vector among the set's members: [flags | hit bits | ~invalidate
//      bits]. Word 0 holds flags, each meaning "every member ..." (the engine adds its own).
//      With it may ride the input of the one operation pending, a small cached host allreduce
//      (RiderOf; HVD_EAGER_ALLREDUCE_MAX_BYTES).
//   3. erase invalidated slots everywhere; run the slots whose bit survived on every member, in
//      slot order. At steady state this is the whole cycle: no gather through the set's root.
//      When the one slot run is the riders' on every member, it runs on their data: the direct
//      allreduce then exchanges nothing (RunsOnRiders).
//   4. if any member has uncached requests: gather request lists to the set's first member,
//      whose coordinator decides (ready keys, mismatches, stalls, join) and broadcasts a response
//      list that every member runs and adds to its cache in the same order.
// Only the set's members talk: over a view of the job transport (transport/group.h), so the
// links already open between ranks carry every set.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "base/mutex.h"
#include "collectives/collectives.h"
#include "core/engine_stats.h"
#include "core/executor.h"
#include "core/operation.h"
#include "negotiation/coordinator.h"
#include "negotiation/exchange.h"
#include "negotiation/response_cache.h"
#include "stall/stall_reporter.h"
#include "timeline/timeline.h"

namespace hvd::runtime::core {

// Flag bits of word 0 of the control vector; AND-reduced, so each says "every member ...".
inline constexpr uint64_t kNoUncached = 1;   // ... has nothing for the coordinator (the runner's)
inline constexpr uint64_t kNotStopping = 2;  // ... wants to go on (global set; the engine's)
inline constexpr uint64_t kNoNewWork = 4;    // ... took no submission this round (global set)
inline constexpr uint64_t kStayInSet = 8;    // ... will run another cycle of this set before the
                                             // next global round (process sets; the engine's)

struct SetRunnerOptions {
  uint32_t cache_capacity = negotiation::kDefaultCacheCapacity;
  // A cached host allreduce of at most this many bytes, alone in a cycle, sends its input with
  // the ready bits; when every member did so for it, it runs on that data without an exchange of
  // its own (HVD_EAGER_ALLREDUCE_MAX_BYTES; 0: never).
  uint32_t eager_max_bytes = 0;
  double stall_check_seconds = 60;
  double stall_shutdown_seconds = 0;
  // Told of stall verdicts and of progress after them (null: no launcher to tell).
  stall::StallReporter* stall_reporter = nullptr;
  // Members of the set on this host: its waits spin as among that many ranks
  // (transport::ScopedSpinRanks); 0: as the job's transport decides (the global set).
  int host_members = 0;
};

class SetRunner {
 public:
  // Completes one of this set's operations on behalf of the runner (the engine forgets its name,
  // then completes it). Also called for every operation FailAll fails.
  using Finish = std::function<void(internal::Operation* op, const Status& status)>;
  // Applies a process-set change response (global set only) and returns its outcome; `op` is
  // this rank's operation for it.
  using ApplySetChange =
      std::function<Status(const negotiation::Response& response, internal::Operation* op)>;

  // `members`: the set's job ranks, sorted; `comm` runs over `view` (null for the global set,
  // whose comm is the job's). Executor, timeline and counters are shared by all sets and outlive
  // the runner.
  SetRunner(int id, std::vector<int> members, collectives::Comm comm,
            std::unique_ptr<transport::Transport> view, const SetRunnerOptions& options,
            Executor* executor, timeline::Timeline* timeline, RoundCounters* counters,
            Finish finish, ApplySetChange apply);
  SetRunner(const SetRunner&) = delete;
  SetRunner& operator=(const SetRunner&) = delete;

  int id() const { return id_; }
  const std::vector<int>& members() const { return members_; }
  const collectives::Comm& comm() const { return comm_; }
  bool idle() const { return pending_.empty(); }

  // Takes a submitted operation (its request's root, if any, already a rank of this set) at
  // about `now` (the round's time: it dates stalls, which are seconds long).
  void Add(std::shared_ptr<internal::Operation> op, std::chrono::steady_clock::time_point now);

  // One cycle. `flags` are the engine's bits for word 0 (kNotStopping, kNoNewWork, kStayInSet);
  // `*agreed` gets word 0 as AND-reduced over the members. When the agreed flags lack kNotStopping
  // nothing else happens (the engine stops). A non-OK status means a transport failure: the job
  // cannot go on.
  Status Cycle(uint64_t flags, uint64_t* agreed);

  // Fails every pending operation with `status`.
  void FailAll(const Status& status);

  // The coordinator's oldest stall (set's first member only); false when there is none.
  bool OldestStall(std::chrono::steady_clock::time_point now, stall::PendingKey* out) const;

 private:
  enum class State { kNew, kCached, kSent };
  struct Pending {
    std::shared_ptr<internal::Operation> op;
    State state = State::kNew;
    uint32_t slot = 0;
    uint64_t generation = 0;    // cache generation when `slot` was looked up
    uint32_t rider_cycles = 0;  // cycles it could have ridden in (RiderOf)
    std::chrono::steady_clock::time_point enqueued;
  };

  void Classify(std::vector<uint32_t>* invalidate);
  bool ReadyBits(uint64_t flags);
  void TakeHits();
  bool RunsOnRiders(const negotiation::Rider& rider) const;
  void RefreshAfterCacheChange();
  Status SlowPath();
  negotiation::Rider RiderOf();
  Status Run(const std::vector<negotiation::Response>& responses, const collectives::Comm& comm);
  void Complete(const std::string& key, const Status& status);
  bool joined_self() const { return joined_.count(comm_.rank()) > 0; }

  const int id_;
  const std::vector<int> members_;
  std::unique_ptr<transport::Transport> view_;  // before comm_, which points into it
  const collectives::Comm comm_;
  const SetRunnerOptions options_;
  Executor* const executor_;
  timeline::Timeline* const timeline_;
  RoundCounters* const counters_;
  const Finish finish_;
  const ApplySetChange apply_;

  std::map<std::string, Pending> pending_;
  static constexpr size_t kSpareNodes = 64;
  std::vector<std::map<std::string, Pending>::node_type> spare_;  // for Add, from Complete
  negotiation::ResponseCache cache_;
  std::unique_ptr<negotiation::Coordinator> coordinator_;  // the set's first member
  std::set<int> joined_;                                   // ranks of this set
  // Cycle's scratch, kept so that a steady-state cycle allocates nothing for them.
  std::vector<uint32_t> invalidate_;
  std::vector<uint64_t> bits_;
  negotiation::Riders riders_;
  std::vector<negotiation::Response> hits_;
  // The cache slot each of hits_ was copied from, at cache generation hits_generation_ (TakeHits).
  static constexpr uint32_t kNoSlot = ~uint32_t{0};
  std::vector<uint32_t> hit_slots_;
  uint64_t hits_generation_ = 0;
  // A key of this set failed as stalled in cycle stall_cycle_ (stall_failed_): the first
  // operation of the set completed in a later cycle is progress (StallReporter::Progress).
  uint64_t cycles_ = 0;
  uint64_t stall_cycle_ = 0;
  bool stall_failed_ = false;
  void StallFailed() {
    stall_failed_ = true;
    stall_cycle_ = cycles_;
  }
  // Coordinator only: the earliest time a stall may force a slow path again (Cycle).
  std::chrono::steady_clock::time_point next_inspection_;
};

}  // namespace hvd::runtime::core
