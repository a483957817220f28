// The engine: one background thread per process that turns submitted operations into
// collectives, in lockstep with every other rank.
//
// Process sets: each set the rank belongs to has a SetRunner (core/set_runner.h) that negotiates
// the set's operations among its members only. One round of the background loop runs one cycle of
// every set this rank belongs to, the global set (id 0) first, then the others by increasing id.
// Every member of a set reaches the set's n-th cycle in the same round, so the sets' exchanges
// (over links the sets share) can never wait on each other in a circle; a set whose operations
// wait on a member never holds up another set: its cycle simply finds nothing ready.
//
// The global set's cycle also carries the engine's decisions:
//   stop      - any rank's Shutdown() stops every rank in the same round;
//   new work  - when some rank took new submissions in a round, the ranks that took none start
//               the next round at once instead of sleeping until their next HVD_CYCLE_TIME tick,
//               so a process set whose ranks submit does not wait a tick per operation for ranks
//               outside it (the submitting ranks keep the cadence that lets tensors fuse);
//   sets      - AddProcessSet/RemoveProcessSet are negotiated there, so every rank changes its
//               table in the same round and the new set's first cycle is in the same round
//               everywhere.
// Between two global rounds the members of a process set may run more cycles of that set alone
// ("stay in set"): each cycle's AND carries kStayInSet, which a member sets until HVD_CYCLE_TIME
// has passed since its global cycle ended, unless it has a stop request or a submission for
// another set. So a set busy with small operations runs them at the pace of a job of its own
// size instead of paying a whole-job negotiation each; the global round still comes about once
// per tick (stop, set changes, the global set's work). Every member runs the same number of cycles
// of the set (they agreed on each), so the lockstep above still holds; and a set's extra cycles
// end by each member's tick whatever other sets do, so sets that overlap only delay each other
// (members take their sets in increasing id), never wait on each other in a circle. A round is
// therefore made of steps: the global cycle and each set's first cycle, then (once a set's members
// agree to stay) one step per further cycle of that set, taken as each comes due (a submission,
// work pending in the set, or the tick), then the round's remaining sets. Between steps no thread
// holds the token, so the caller of a synchronous operation on the set can run its cycle.
//
// Who runs a round: the background thread, or the caller's own thread. Handing a synchronous
// operation (hvd::Allreduce, hvd_run_allreduce) to the background thread costs two thread
// hand-offs, the submission waking it and the completion waking the caller; on a host with a
// core per rank or fewer each is a context switch of a few microseconds, more than a small
// collective takes. So (HVD_RUN_ON_CALLER) the thread that submits a synchronous host operation
// runs rounds itself until it completes: whoever holds the round token (driver_) runs rounds,
// one at a time, so every rank still runs its rounds in one sequence and the lockstep above is
// unchanged; which thread runs a given round is invisible to the other ranks. A caller that
// finds the token held waits for it (or for its operation to complete); the background thread
// hands it over at the end of its round rather than take the caller's operation itself, which
// would keep every later round on the background thread. A waiting caller also makes its rounds
// follow one another at once instead of at ticks: its peers' rounds pace them (a peer submitting
// the same operation a moment later must not cost a tick). A thread that waits for an
// asynchronous operation runs the rounds the same way (RunUntilDone): a training step waiting for
// its gradients does not wait for the tick. The background thread runs rounds when no caller
// does: ticks, asynchronous submissions (their cadence is what lets tensors fuse), stop. It is
// never woken per operation: a caller's rounds move the tick on, which the background thread finds
// at the old tick, sleeping again. After a round in which no rank had anything new and none had to
// be waited for (every rank's caller waits, e.g. for operations submitted in different orders), a
// caller's next round comes at the tick, not back to back. Callbacks of operations completing in a
// caller's round run on its thread, which counts as the background thread meanwhile (blocking calls
// fail; submissions are queued, never run there). Once a device operation was submitted, every
// round runs on the background thread (a round may set CUDA's current device, which is per thread:
// a caller's must not change under it); a caller then running rounds leaves device operations
// queued and hands the rounds back.
//
// A transport failure fails every pending operation with the error (naming the peer) and stops
// the engine; later submissions fail at once with the same error.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "base/mutex.h"
#include "base/thread_annotations.h"
#include "collectives/collectives.h"
#include "core/device_executor.h"
#include "core/engine_stats.h"
#include "core/executor.h"
#include "core/operation.h"
#include "core/process_set_table.h"
#include "core/set_runner.h"
#include "stall/stall_reporter.h"
#include "timeline/timeline.h"

namespace hvd::runtime::core {

struct EngineOptions {
  std::chrono::microseconds cycle_time{1000};
  // An elastic worker: a peer leaving is how the job shrinks, not an error of this rank (the
  // failure is logged as a warning that says so; the program re-forms).
  bool elastic = false;
  // A synchronous host operation's rounds run on the caller's thread (above).
  bool run_on_caller = true;
  fusion::FusionLimits fusion;  // the defaults of the fusion settings (fusion/fusion_settings.h)
  uint32_t cache_capacity = negotiation::kDefaultCacheCapacity;
  uint32_t eager_max_bytes = 0;  // SetRunnerOptions::eager_max_bytes
  double stall_check_seconds = 60;
  double stall_shutdown_seconds = 0;
  // Rank 0 tells it the coordinator's oldest stall (not owned; may be null).
  stall::StallReporter* stall_reporter = nullptr;
  // Sets registered before the engine starts (ids 1, 2, ... in this order); sorted, valid ranks.
  std::vector<std::vector<int>> process_sets;
  // Whether AddProcessSet/RemoveProcessSet may be called while running
  // (HVD_DYNAMIC_PROCESS_SETS).
  bool dynamic_process_sets = false;
  // The job ranks on this host (sorted), whose waits share its cores; empty: unknown.
  std::vector<int> host_ranks;
  // Batches of device tensors: the store NCCL ids go through, each rank's host, the NCCL
  // deadline (core/device_executor.h).
  DeviceExecutorOptions gpu;
};

class Engine {
 public:
  using Clock = std::chrono::steady_clock;

  // `comm.transport` must outlive the engine. `timeline` may be null.
  Engine(collectives::Comm comm, EngineOptions options,
         std::unique_ptr<timeline::Timeline> timeline);
  ~Engine();  // Stop()s if still running
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  void Start();

  // Thread-safe. Fails the operation at once when its process set does not exist or does not
  // include this rank, when its key is already in flight in that set on this rank, or when the
  // engine has stopped. With `caller_waits` (the caller waits for `op` right after this returns)
  // the caller's thread may run rounds here until `op` completes (above), or wait here for it;
  // `op` may then be complete on return. Not past `until`, though: then the background thread
  // goes on with the rounds and the caller waits as it will (hvd_run_allreduce_for: a Python
  // caller that must see Ctrl-C while a peer is late).
  void Enqueue(std::shared_ptr<internal::Operation> op, bool caller_waits = false,
               Clock::time_point until = Clock::time_point::max());

  // Thread-safe. A caller about to wait for `op`, submitted earlier without waiting (an
  // asynchronous submission, or a synchronous one whose caller's time ran out): where `op` runs
  // in host memory and no other thread holds the rounds, this thread runs them until `op`
  // completes or `until`, as a synchronous submission's caller does (above), instead of waiting
  // for the background thread's next tick. Returns at once otherwise, and on the background
  // thread.
  void RunUntilDone(internal::Operation* op, Clock::time_point until);

  // Asks every rank to stop (they stop together at the next round), waits up to `grace` for
  // that, then aborts the transport. Pending operations fail with Aborted. Idempotent.
  Status Stop(std::chrono::milliseconds grace);

  EngineStats stats() const;
  const ProcessSetTable& process_sets() const { return sets_; }
  bool dynamic_process_sets() const { return options_.dynamic_process_sets; }
  timeline::Timeline* timeline() const { return timeline_.get(); }

 private:
  enum class Driver { kNone, kBackground, kCaller };

  void Loop();
  // Whether the next round should start now rather than at the tick.
  // (Reads the clock only when nothing else decides, and not at all given `now`, a read the
  // caller already has: a clock read is a measurable part of a small operation.)
  bool RoundDue(const Clock::time_point* now = nullptr) const HVD_REQUIRES(mu_);
  // Whether a caller may take the token for a round now (above).
  bool CallerMayRun() const HVD_REQUIRES(mu_);
  // After a submission this thread will not run, or a waiter that did not take the token: tells
  // whoever should run the next round (a caller pacing its rounds, or the background thread when
  // it waits for the token or a round is due).
  void HandOnRounds() HVD_REQUIRES(mu_);
  // REQUIRES: mu_, held by `lock`. A caller that will wait for `op`: waits (until `op` completes,
  // `until`, or the token is free) and takes the token; false when it did not take it.
  bool TakeTokenForCaller(internal::Operation* op, Clock::time_point until, base::MutexLock& lock)
      HVD_REQUIRES(mu_);
  // On the caller's thread, holding the token: rounds until `op` completes (or the engine ends);
  // then gives the token back.
  void RunForCaller(internal::Operation* op, Clock::time_point until);
  // REQUIRES: the token. One round and what follows it (stall report, the next round's schedule);
  // false when the engine must stop.
  bool DriveRound();
  // One round; false when the engine must stop.
  bool Round();
  Status RunRound(bool* stop);
  // The round's remaining sets (round_sets_), each one's first cycle, until the members of one
  // agree to stay in it (stay_set_): its further cycles are then the next steps (StayCycle).
  Status RunSets();
  Status FirstSetCycle(SetRunner* runner);
  Status StayCycle(SetRunner* runner);
  // Whether a caller running rounds waits for an operation outside set `set`.
  bool CallerWaitsElsewhere(int set) const;
  // Before a cycle of `runner`'s set: moves the set's submissions into it. Returns whether this
  // rank may stay in the set for another cycle: not when a stop was requested or another set has
  // submissions queued.
  bool TakeSetWork(SetRunner* runner);
  // When the background thread looks again without being woken: the tick, or the stay's.
  Clock::time_point NextWake() const HVD_REQUIRES(mu_);
  // Makes the runner for a set this rank belongs to.
  std::unique_ptr<SetRunner> NewRunner(int id, const std::vector<int>& members);
  Status ApplySetChange(const negotiation::Response& r, internal::Operation* op);
  // After a stop was agreed: "rank N" for the first rank that asked for it (a collective every
  // rank runs in that same round), "this rank", or "some rank" if that cannot be told.
  std::string WhoStopped();
  // Enqueue's check of the operation's process set (below); may rewrite a broadcast's root.
  Status CheckSet(internal::Operation* op) const;
  // The engine's side of completing an operation: forget its name, then complete it.
  void Finish(internal::Operation* op, const Status& status);
  // Fails every queued and pending operation with `status`; later submissions get `later` (the
  // same status when OK).
  void FailAll(const Status& status, const Status& later = Status::OK());

  const collectives::Comm comm_;
  const EngineOptions options_;
  std::unique_ptr<timeline::Timeline> timeline_;
  Executor executor_;
  ProcessSetTable sets_;

  base::Mutex mu_;
  base::CondVar stopped_cv_;
  // The loop sleeps on this between rounds. While the engine is idle (its last round left
  // nothing pending), a submission wakes it at once instead of at the next HVD_CYCLE_TIME tick:
  // a lone synchronous operation then costs a negotiation, not up to a whole cycle time. Busy,
  // the engine keeps its cadence, which is what lets tensors of one backward pass fuse.
  // Also where the background thread waits for the token.
  base::CondVar wake_cv_;
  bool idle_ HVD_GUARDED_BY(mu_) = false;
  Driver driver_ HVD_GUARDED_BY(mu_) = Driver::kNone;  // who holds the round token
  bool loop_wants_token_ HVD_GUARDED_BY(mu_) = false;  // the background thread waits for it
  // Callers of synchronous operations waiting (on caller_cv_) for the token or for their
  // operation: woken when the token is given back or an operation completes.
  int callers_waiting_ HVD_GUARDED_BY(mu_) = 0;
  base::CondVar caller_cv_;
  bool ended_ HVD_GUARDED_BY(mu_) = false;  // a round stopped the engine (failure or agreed stop)
  bool device_ops_ HVD_GUARDED_BY(mu_) = false;  // a device operation was submitted
  // The next round's schedule, from the last round: its tick, and whether it is due at once.
  Clock::time_point next_round_ HVD_GUARDED_BY(mu_){};
  Clock::time_point round_end_ HVD_GUARDED_BY(mu_){};  // the last round's last clock read
  bool skip_wait_ HVD_GUARDED_BY(mu_) = false;
  // ... or, staying in a set (stay_set_ as of the last step): until when, and whether the set has
  // work pending (its next cycle is then due at once).
  int staying_ HVD_GUARDED_BY(mu_) = -1;
  Clock::time_point stay_until_ HVD_GUARDED_BY(mu_){};
  bool stay_busy_ HVD_GUARDED_BY(mu_) = false;
  std::vector<std::shared_ptr<internal::Operation>> queue_ HVD_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<internal::Operation>> taken_;  // RunRound's, from queue_
  // (set, key) of every operation in flight; looked up by (set, name) without a copy.
  struct InFlightKey {
    int set;
    std::string_view key;
  };
  struct InFlightLess {
    using is_transparent = void;
    template <typename A, typename B>
    bool operator()(const A& a, const B& b) const {
      return Set(a) != Set(b) ? Set(a) < Set(b) : Key(a) < Key(b);
    }
    static const int& Set(const std::pair<int, std::string>& p) { return p.first; }
    static const int& Set(const InFlightKey& k) { return k.set; }
    static std::string_view Key(const std::pair<int, std::string>& p) { return p.second; }
    static std::string_view Key(const InFlightKey& k) { return k.key; }
  };
  using InFlight = std::set<std::pair<int, std::string>, InFlightLess>;
  bool InFlightInsert(int set, const std::string& key) HVD_REQUIRES(mu_);
  void InFlightErase(int set, const std::string& key) HVD_REQUIRES(mu_);
  static constexpr size_t kSpareInFlight = 64;
  InFlight in_flight_ HVD_GUARDED_BY(mu_);
  std::vector<InFlight::node_type> spare_in_flight_ HVD_GUARDED_BY(mu_);
  bool stop_requested_ HVD_GUARDED_BY(mu_) = false;
  bool stopped_ HVD_GUARDED_BY(mu_) = false;
  // Another rank's Shutdown stopped this engine: what this rank reports of it (abort/<rank>), for
  // operations submitted afterwards too; "" while no peer stopped it.
  std::string peer_shutdown_report_ HVD_GUARDED_BY(mu_);
  Status final_status_ HVD_GUARDED_BY(mu_);

  // The token's holder only (the background thread or a caller, one at a time; handed over
  // under mu_), and the constructor.
  internal::Operation* caller_op_ = nullptr;  // the operation of the caller holding the token
  std::map<int, std::unique_ptr<SetRunner>> runners_;  // the sets this rank belongs to
  Clock::time_point round_start_;                      // the current round's
  Clock::time_point sets_start_;                       // ... end of its global cycle
  std::vector<int> round_sets_;  // the sets whose first cycle of this round is still to come
  int stay_set_ = -1;            // the set whose members agreed to run another cycle, or -1
  Clock::time_point stay_tick_;  // ... until when this rank says it stays
  bool sent_stop_ = false;       // this round's global flags asked to stop
  bool took_new_work_ = false;   // the last round took submissions on this rank
  bool took_set_work_ = false;   // ... a set took some between its own cycles
  Clock::duration last_global_cycle_{};  // how long it took
  bool others_took_new_work_ = false;    // ... on some rank (the global flags said so)
  Clock::time_point next_stall_report_;
  std::thread thread_;
  RoundCounters counters_;
};

}  // namespace hvd::runtime::core
