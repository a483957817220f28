// The engine's submission side (core/engine.h): Enqueue's checks and queueing (and a waiting
// caller taking the rounds), the names in flight, and an operation's completion.
#include <algorithm>

#include "core/engine.h"

namespace hvd::runtime::core {

using negotiation::OpType;

// The operation's process set exists and has this rank (and a broadcast's root: made the set's
// rank). The global set always exists and holds every rank: only a broadcast needs its members
// there (the root's index), which spares most operations a lock and a copy.
Status Engine::CheckSet(internal::Operation* op) const {
  const int set = op->request.process_set;
  if (set == 0 && op->request.type != OpType::kBroadcast) return Status::OK();
  thread_local std::vector<int> members;  // assigned, not allocated, per operation
  if (!sets_.Get(set, &members)) {
    return InvalidArgument("process set " + std::to_string(set) +
                           " does not exist (registered: " + sets_.DescribeIds() +
                           "); create it with add_process_set on every rank first");
  }
  if (!std::binary_search(members.begin(), members.end(), comm_.rank())) {
    return InvalidArgument("rank " + std::to_string(comm_.rank()) + " is not in process set " +
                           std::to_string(set) + " (ranks " + RanksText(members) +
                           "); only its members can submit to it");
  }
  if (op->request.type == OpType::kBroadcast) {
    // The caller names the root by its job rank (as Horovod); the set negotiates with its own.
    const auto it = std::lower_bound(members.begin(), members.end(), op->request.root);
    if (it == members.end() || *it != op->request.root) {
      return InvalidArgument("broadcast root rank " + std::to_string(op->request.root) +
                             " is not in process set " + std::to_string(set) + " (ranks " +
                             RanksText(members) + ")");
    }
    op->request.root = static_cast<int32_t>(it - members.begin());
  }
  return Status::OK();
}

void Engine::Enqueue(std::shared_ptr<internal::Operation> op, bool caller_waits,
                     Clock::time_point until) {
  Status reject = CheckSet(op.get());
  std::string peer_report;  // what this rank reports of the peer that stopped hvd; "": nothing
  const std::string& key = op->request.key;
  const int set = op->request.process_set;
  if (reject.ok()) {
    base::MutexLock lock(&mu_);
    // final_status_ is set (with the queue drained) the moment the engine fails or stops, so
    // nothing can be queued after the last drain.
    if (stopped_ || stop_requested_ || !final_status_.ok()) {
      reject =
          final_status_.ok()
              ? FailedPrecondition("hvd has been shut down; '" + key + "' was not submitted")
              : final_status_.WithContext(std::string(negotiation::OpTypeName(op->request.type)) +
                                          " '" + key + "' was not submitted");
      if (options_.stall_reporter != nullptr) peer_report = peer_shutdown_report_;
    } else if (!InFlightInsert(set, key)) {
      reject = InvalidArgument(
          "an operation named '" + key + "' is already in flight on this " +
          (set == 0 ? std::string("rank") : "rank in process set " + std::to_string(set)) +
          "; names must be unique among pending operations (wait for the "
          "first one, or rename). Only this rank refuses it: a rank whose first one completed "
          "took its second, which now waits for this rank");
    } else {
      const bool device = op->on_device();
      device_ops_ = device_ops_ || device;
      op->engine = this;
      queue_.push_back(op);
      // Not from a thread running rounds (a callback submitting from a caller's round): it would
      // wait here for the token it holds.
      const bool run = caller_waits && options_.run_on_caller && !device &&
                       !internal::OnBackgroundThread() && TakeTokenForCaller(op.get(), until, lock);
      if (!run) {
        HandOnRounds();
        return;
      }
    }
  }
  if (reject.ok()) {
    RunForCaller(op.get(), until);
    return;
  }
  // Before user code hears of it: this operation fails because another rank shut hvd down.
  if (!peer_report.empty()) options_.stall_reporter->ReportPeerFailure(peer_report);
  op->Complete(reject);
}

bool Engine::TakeTokenForCaller(internal::Operation* op, Clock::time_point until,
                                base::MutexLock& lock) {
  // While another thread holds the token (usually the background thread finishing the round that
  // completed this caller's previous operation), wait for it rather than leave `op` to that
  // thread: otherwise the background thread, finding it queued, would run every later round too
  // and each operation would cost its two hand-offs.
  ++callers_waiting_;
  if (driver_ == Driver::kCaller) caller_cv_.NotifyAll();  // one pacing its rounds takes it
  caller_cv_.WaitUntil(lock, until, [&]() HVD_REQUIRES(mu_) {
    return ended_ || op->done() || CallerMayRun() || driver_ == Driver::kNone;
  });
  --callers_waiting_;
  if (op->done() || !CallerMayRun()) return false;
  driver_ = Driver::kCaller;
  idle_ = false;
  return true;
}

void Engine::HandOnRounds() {
  // A caller running rounds takes the queue in its next one, or hands it on when it gives the
  // token back (RunForCaller): the background thread is not woken for it.
  if (driver_ == Driver::kCaller) {
    caller_cv_.NotifyAll();  // a caller pacing its rounds (RunForCaller) takes it at once
  } else if (loop_wants_token_ || RoundDue()) {
    wake_cv_.NotifyAll();
  }
}

void Engine::RunUntilDone(internal::Operation* op, Clock::time_point until) {
  // Only an operation of this engine's (not one of an earlier session's), on host memory, with
  // time left to wait: a zero timeout (a poll) must not take the token, which would end the
  // engine's idleness and with it the prompt round a fresh submission gets.
  if (op->engine != this || !options_.run_on_caller || op->on_device() ||
      internal::OnBackgroundThread() ||
      (until != Clock::time_point::max() && Clock::now() >= until)) {
    return;
  }
  {
    base::MutexLock lock(&mu_);
    if (op->done()) return;
    if (!TakeTokenForCaller(op, until, lock)) {
      // The background thread may have handed the token to this thread at the end of the round
      // that completed `op`, and be waiting to get it back.
      HandOnRounds();
      return;
    }
  }
  RunForCaller(op, until);
}

// The set's nodes are recycled: an operation's name is copied into a node the previous one
// left, so that a steady state allocates nothing here.
bool Engine::InFlightInsert(int set, const std::string& key) {
  const auto at = in_flight_.lower_bound(InFlightKey{set, key});
  if (at != in_flight_.end() && at->first == set && at->second == key) return false;
  if (spare_in_flight_.empty()) {
    in_flight_.emplace_hint(at, set, key);
    return true;
  }
  auto node = std::move(spare_in_flight_.back());
  spare_in_flight_.pop_back();
  node.value().first = set;
  node.value().second.assign(key);
  in_flight_.insert(at, std::move(node));
  return true;
}

void Engine::InFlightErase(int set, const std::string& key) {
  auto it = in_flight_.find(InFlightKey{set, key});
  if (it == in_flight_.end()) return;
  auto node = in_flight_.extract(it);
  if (spare_in_flight_.size() < kSpareInFlight) spare_in_flight_.push_back(std::move(node));
}

void Engine::Finish(internal::Operation* op, const Status& status) {
  {
    base::MutexLock lock(&mu_);
    InFlightErase(op->request.process_set, op->request.key);
  }
  op->Complete(status);
  base::MutexLock lock(&mu_);
  if (callers_waiting_ > 0) caller_cv_.NotifyAll();  // one may wait for this operation
}

}  // namespace hvd::runtime::core
