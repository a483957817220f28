#include "core/engine.h"

#include <algorithm>
#include <climits>
#include <cstdlib>

#include "base/logging.h"
#include "core/thread_affinity.h"
#include "transport/group.h"
#include "transport/transport.h"

namespace hvd::runtime::core {

using negotiation::OpType;
using Clock = std::chrono::steady_clock;

Engine::Engine(collectives::Comm comm, EngineOptions options,
               std::unique_ptr<timeline::Timeline> timeline)
    : comm_(comm),
      options_(std::move(options)),
      timeline_(std::move(timeline)),
      executor_(options_.fusion, timeline_.get(), options_.gpu),
      sets_(comm.size()) {
  runners_[0] = NewRunner(0, {});
  for (const auto& ranks : options_.process_sets) {
    const int id = sets_.Add(ranks);
    if (std::binary_search(ranks.begin(), ranks.end(), comm_.rank())) {
      runners_[id] = NewRunner(id, ranks);
    }
  }
}

Engine::~Engine() {
  Stop(std::chrono::milliseconds(0));
}

void Engine::Start() {
  thread_ = std::thread([this] {
    PinBackgroundThread([](const char* name) { return std::getenv(name); });  // --thread-affinity
    Loop();
  });
}

Status Engine::Stop(std::chrono::milliseconds grace) {
  {
    base::MutexLock lock(&mu_);
    stop_requested_ = true;
    wake_cv_.NotifyAll();
    caller_cv_.NotifyAll();  // a caller pacing its rounds
    if (!thread_.joinable()) return final_status_;
    if (!stopped_cv_.WaitFor(lock, grace, [&]() HVD_REQUIRES(mu_) { return stopped_; })) {
      // Peers did not take part in an orderly stop (dead or stuck): break the links.
      comm_.transport->Abort("this rank is shutting down (hvd::Shutdown)");
      // A background thread waiting in NCCL for a peer would never see the transport's abort.
      executor_.AbortDevice();
    }
  }
  thread_.join();
  base::MutexLock lock(&mu_);
  return final_status_.code() == StatusCode::kAborted ? Status::OK() : final_status_;
}

void Engine::Loop() {
  internal::MarkBackgroundThread();
  base::MutexLock lock(&mu_);
  next_round_ = Clock::now();  // the first round at once
  while (true) {
    // Until the token is free and a round is due. A caller may run rounds meanwhile (it takes
    // the token without waking this thread): the schedule is then re-read from its last round.
    while (!ended_) {
      // A caller waiting for the token takes the round it would run (Enqueue).
      auto caller_takes = [&]()
                              HVD_REQUIRES(mu_) { return callers_waiting_ > 0 && CallerMayRun(); };
      auto mine = [&]() HVD_REQUIRES(mu_) {
        return driver_ == Driver::kNone && !caller_takes() && RoundDue();
      };
      if (mine()) break;
      if (caller_takes()) caller_cv_.NotifyAll();
      if (caller_takes() || (driver_ != Driver::kNone && Clock::now() >= NextWake())) {
        // The tick passed during another thread's round (or a caller is about to take one):
        // wake once when the token comes back, and look again. (Not until the token is free: a
        // caller that takes it again at once would then wake this thread at every operation.)
        loop_wants_token_ = true;
        wake_cv_.Wait(lock);
        loop_wants_token_ = false;
        continue;
      }
      // Until the tick, or a submission to an idle engine, a stop, or a caller's release with a
      // round due. A caller running rounds meanwhile moves the tick on, without waking this
      // thread (it would preempt the caller at every operation): it finds that out at the old
      // tick and sleeps again.
      wake_cv_.WaitUntil(lock, NextWake(), [&]() HVD_REQUIRES(mu_) { return ended_ || mine(); });
    }
    if (ended_) break;
    driver_ = Driver::kBackground;
    idle_ = false;
    lock.Unlock();
    const bool more = DriveRound();
    lock.Lock();
    driver_ = Driver::kNone;
    if (!more) ended_ = true;
    if (callers_waiting_ > 0) caller_cv_.NotifyAll();
  }
  lock.Unlock();
  if (timeline_) timeline_->Close();
  lock.Lock();
  stopped_ = true;
  stopped_cv_.NotifyAll();
}

bool Engine::RoundDue(const Clock::time_point* now) const {
  auto at = [now] { return now != nullptr ? *now : Clock::now(); };
  // Staying in a set (RunSets): its next cycle as soon as this rank has something (for that set,
  // or another: then it says it leaves), the set still has work pending, or at the tick.
  if (staying_ >= 0) {
    return stop_requested_ || !queue_.empty() || stay_busy_ || at() >= stay_until_;
  }
  // A long round (big collective) does not owe sleep to later ones. A rank that was given nothing
  // new while others were goes straight to the next round and waits there for them (skip_wait_):
  // they keep the cadence (rounds start when the last rank arrives), and it does not make a busy
  // process set wait a tick per operation for ranks outside it. An idle engine starts a round
  // for a submission at once.
  return stop_requested_ || skip_wait_ || (idle_ && !queue_.empty()) || at() >= next_round_;
}

Engine::Clock::time_point Engine::NextWake() const {
  return staying_ >= 0 ? stay_until_ : next_round_;
}

bool Engine::CallerMayRun() const {
  return options_.run_on_caller && driver_ == Driver::kNone && !ended_ && !stop_requested_ &&
         !device_ops_;
}

void Engine::RunForCaller(internal::Operation* op, Clock::time_point until) {
  const bool bounded = until != Clock::time_point::max();
  bool more = true;
  bool ran = false;  // a round: its end time serves the wake-up decision below
  {
    internal::ScopedBackgroundThread as_background;
    caller_op_ = op;
    for (bool first = true; more && !op->done(); first = false) {
      {
        base::MutexLock lock(&mu_);
        // Device operations run on the background thread (CUDA's current device is per thread):
        // one queued hands the rounds back to it. After a round in which no rank had anything
        // new and none had to be waited for (every rank is waiting, e.g. for operations
        // submitted in different orders), the next comes at the tick, as the background
        // thread's would, not back to back at full speed.
        if (device_ops_) break;
        // Past the caller's time (peers late): the background thread takes the rounds over.
        if (bounded && Clock::now() >= until) break;
        if (!first && !took_new_work_ && !others_took_new_work_ &&
            last_global_cycle_ < std::chrono::microseconds(100)) {
          caller_cv_.WaitUntil(lock, std::min(NextWake(), until), [&]() HVD_REQUIRES(mu_) {
            return op->done() || stop_requested_ || !queue_.empty();
          });
          if (op->done()) break;
        }
      }
      RoundCounters::Add(counters_.caller_rounds);
      more = DriveRound();
      ran = true;
    }
    caller_op_ = nullptr;
  }
  base::MutexLock lock(&mu_);
  driver_ = Driver::kNone;
  if (!more) ended_ = true;
  // The background thread sleeps until the tick it last saw, never later than the next one; it
  // is woken only when it waits for the token, must stop, or has a round due at once. Due as of
  // the last round's end (a clock read is a measurable part of a small operation): a tick that
  // passed since is one the background thread's own timed wait has reached already.
  if (loop_wants_token_ || ended_ || RoundDue(ran ? &round_end_ : nullptr)) wake_cv_.NotifyAll();
  if (callers_waiting_ > 0) caller_cv_.NotifyAll();
}

bool Engine::DriveRound() {
  const bool global = stay_set_ < 0;  // (else a set's next cycle)
  if (global) round_start_ = Clock::now();
  if (!Round()) return false;
  // A global round without process sets read the clock at the end of its global cycle, which
  // serves (reports are 250 ms apart; a clock read is a measurable part of a small operation).
  const auto now = global && runners_.size() == 1 ? sets_start_ : Clock::now();
  if (options_.stall_reporter != nullptr && now >= next_stall_report_) {
    // The oldest stall any coordinator on this rank knows of: the global set's on rank 0, and
    // each process set's on its first member (reports are per rank: "stall/<rank>").
    next_stall_report_ = now + std::chrono::milliseconds(250);
    stall::PendingKey oldest, candidate;
    bool stalled = false;
    for (const auto& [id, runner] : runners_) {
      if (runner->OldestStall(now, &candidate) &&
          (!stalled || candidate.first_seen < oldest.first_seen)) {
        oldest = std::move(candidate);
        stalled = true;
      }
    }
    // Also on ranks that coordinate nothing (now): a set whose coordinator was here may have
    // been removed with a stall reported, which must not stand for the rest of the job.
    options_.stall_reporter->SetInspectorReport(stalled, oldest);
  }
  bool idle = true;
  for (const auto& [id, runner] : runners_) idle = idle && runner->idle();
  const auto staying = runners_.find(stay_set_);
  base::MutexLock lock(&mu_);
  idle_ = idle;
  staying_ = stay_set_;
  stay_until_ = stay_tick_;
  stay_busy_ = staying != runners_.end() && !staying->second->idle();
  // The next tick counts from this round's start, not from the previous tick: rounds woken early
  // by submissions must not push the tick ever further ahead (a busy rank with a request still
  // pending would then sleep for seconds while the others wait for it).
  next_round_ = round_start_ + options_.cycle_time;
  round_end_ = now;
  skip_wait_ = !took_new_work_ && others_took_new_work_;
  return true;
}

EngineStats Engine::stats() const {
  EngineStats stats;
  counters_.Into(&stats);
  stats.allreduce_collectives = executor_.allreduce_collectives();
  stats.gpu_nccl_batches = executor_.device().nccl_batches();
  stats.gpu_staged_batches = executor_.device().staged_batches();
  stats.gpu_hierarchical_batches = executor_.device().hierarchical_batches();
  return stats;
}

bool Engine::Round() {
  if (stay_set_ < 0) {
    RoundCounters::Add(counters_.cycles);
    if (timeline_) timeline_->MarkCycle();
  }
  bool stop = false;
  Status s = RunRound(&stop);
  if (!s.ok()) {
    if (options_.elastic) {
      HVD_LOG(WARNING) << s.ToString()
                       << " (elastic job: a worker left or failed; this one re-forms without it)";
    } else {
      HVD_LOG(ERROR) << s.ToString();
    }
    comm_.transport->Abort(s.message());
    // Before user code hears of it: this rank fails because of a peer (launcherd names the rank
    // that failed first as the job's cause, not this one).
    if (options_.stall_reporter != nullptr) options_.stall_reporter->ReportPeerFailure(s.message());
    FailAll(s);
    return false;
  }
  if (stop) {
    const std::string who = WhoStopped();
    bool self_requested, pending;
    {
      base::MutexLock lock(&mu_);
      self_requested = stop_requested_;
      pending = !queue_.empty();
    }
    for (const auto& [id, runner] : runners_) pending = pending || !runner->idle();
    if (!self_requested) {
      const std::string report =
          who + " shut hvd down while rank " + std::to_string(comm_.rank()) + " still used it";
      {
        base::MutexLock lock(&mu_);
        peer_shutdown_report_ = report;
      }
      // Operations pending here fail because of that rank; so will any submitted from now on
      // (Enqueue reports those).
      if (pending && options_.stall_reporter != nullptr) {
        options_.stall_reporter->ReportPeerFailure(report);
      }
    }
    // Later submissions are told what happened without the claim that they were pending.
    const std::string what = "hvd was shut down by " + who +
                             " (hvd::Shutdown, called by the program or as its process exited)";
    FailAll(Aborted(what + " while this operation was pending"),
            Aborted(what + "; nothing can be submitted until hvd::Init() is called again"));
    return false;
  }
  return true;
}

std::string Engine::WhoStopped() {
  // Every rank learned of the stop in the same global cycle, so all run this one small
  // collective: the lowest rank whose flag asked to stop. On a failure, the message stays vague.
  int32_t first = sent_stop_ ? comm_.rank() : INT32_MAX;
  Status s = collectives::Allreduce(comm_, &first, 1, DataType::kInt32, ReduceOp::kMin);
  if (!s.ok() || first == INT32_MAX) return "some rank";
  return first == comm_.rank() ? "this rank" : "rank " + std::to_string(first);
}

void Engine::FailAll(const Status& status, const Status& later) {
  std::vector<std::shared_ptr<internal::Operation>> ops;
  {
    base::MutexLock lock(&mu_);
    if (final_status_.ok()) final_status_ = later.ok() ? status : later;
    ops.swap(queue_);
  }
  for (auto& [id, runner] : runners_) runner->FailAll(status);
  for (auto& op : ops) Finish(op.get(), status);
  base::MutexLock lock(&mu_);
  in_flight_.clear();
}

Status Engine::RunRound(bool* stop) {
  if (stay_set_ >= 0) {
    // Every member of the set agreed to run another cycle of it (RunSets).
    const int id = stay_set_;
    auto it = runners_.find(id);
    if (it == runners_.end()) {
      stay_set_ = -1;  // cannot happen: sets change only in global cycles
    } else {
      HVD_RETURN_IF_ERROR_CTX(StayCycle(it->second.get()), "process set " + std::to_string(id));
    }
    return stay_set_ >= 0 ? Status::OK() : RunSets();
  }
  bool stopping;
  // Swapped with the queue, so that both keep their memory from round to round.
  std::vector<std::shared_ptr<internal::Operation>>& ops = taken_;
  ops.clear();
  {
    base::MutexLock lock(&mu_);
    stopping = stop_requested_;
    ops.swap(queue_);
    if (caller_op_ != nullptr) {
      // A caller's round leaves device operations to the background thread (RunForCaller):
      // to the other ranks this rank just submits them a round later.
      size_t kept = 0;
      for (auto& op : ops) {
        if (op->on_device()) {
          queue_.push_back(std::move(op));
        } else {
          ops[kept++] = std::move(op);
        }
      }
      ops.resize(kept);
    }
  }
  for (auto& op : ops) {
    auto it = runners_.find(op->request.process_set);
    if (it == runners_.end()) {  // removed between Enqueue and now
      Finish(op.get(), Aborted("process set " + std::to_string(op->request.process_set) +
                               " was removed before '" + op->request.key + "' could run"));
      continue;
    }
    it->second->Add(std::move(op), round_start_);
  }
  const bool took = !ops.empty();
  ops.clear();  // no reference kept past the round
  // Submissions a set took between its own cycles last round count as this round's: ranks outside
  // the set then go straight into the next round instead of sleeping to their tick, and the set
  // does not wait for them when its members come back to the global round.
  took_new_work_ = took || took_set_work_;
  took_set_work_ = false;

  uint64_t agreed = 0;
  sent_stop_ = stopping;
  const uint64_t flags = (stopping ? 0 : kNotStopping) | (took_new_work_ ? 0 : kNoNewWork);
  {
    // A rank given nothing while others were comes to this cycle only to wait for them (Loop).
    // When its last wait was long too (they are busy in a process set's own cycles, up to a
    // tick), it sleeps rather than spin on cores they need; a short one (two ranks trading small
    // operations) keeps the spin, whose wake-up is quicker than a sleep's.
    const bool patient = !took_new_work_ && others_took_new_work_ &&
                         last_global_cycle_ > std::chrono::microseconds(500);
    transport::ScopedPatientWaits patient_waits(patient);
    // (From the round's start, DriveRound's clock read: the queue taken since costs well under
    // the thresholds this is compared with, and a clock read is a measurable part of a small
    // operation.)
    HVD_RETURN_IF_ERROR(runners_.at(0)->Cycle(flags, &agreed));
    sets_start_ = Clock::now();
    last_global_cycle_ = sets_start_ - round_start_;
  }
  if (!(agreed & kNotStopping)) {
    *stop = true;
    return Status::OK();
  }
  others_took_new_work_ = !(agreed & kNoNewWork);
  // The global set's cycle may have added or removed sets: every rank sees the same change in
  // this round, so every member runs the new set's first cycle now.
  round_sets_.clear();
  for (const auto& [id, runner] : runners_) {
    if (id != 0) round_sets_.push_back(id);
  }
  return RunSets();
}

}  // namespace hvd::runtime::core
