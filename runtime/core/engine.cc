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

constexpr const char* kPeerShutdown = "another rank shut hvd down while this rank still used it";

namespace {

std::string RanksText(const std::vector<int>& ranks) {
  std::string s = "[";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s + "]";
}

}  // namespace

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

std::unique_ptr<SetRunner> Engine::NewRunner(int id, const std::vector<int>& members) {
  SetRunnerOptions o;
  o.cache_capacity = options_.cache_capacity;
  o.stall_check_seconds = options_.stall_check_seconds;
  o.stall_shutdown_seconds = options_.stall_shutdown_seconds;
  auto finish = [this](internal::Operation* op, const Status& s) { Finish(op, s); };
  auto apply = [this](const negotiation::Response& r, internal::Operation* op) {
    return ApplySetChange(r, op);
  };
  if (id == 0) {
    std::vector<int> all;
    sets_.Get(0, &all);
    return std::make_unique<SetRunner>(0, all, comm_, nullptr, o, &executor_, timeline_.get(),
                                       &stats_mu_, &stats_, finish, apply);
  }
  for (int r : members) {
    o.host_members += std::binary_search(options_.host_ranks.begin(), options_.host_ranks.end(), r);
  }
  // A view of the job's transport: the set reuses the links already open between its members.
  std::unique_ptr<transport::Transport> view = transport::NewGroupView(comm_.transport, members);
  collectives::Comm comm = comm_.Over(view.get());
  comm.job_ranks = std::make_shared<const std::vector<int>>(members);
  return std::make_unique<SetRunner>(id, members, comm, std::move(view), o, &executor_,
                                     timeline_.get(), &stats_mu_, &stats_, finish, apply);
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

void Engine::Enqueue(std::shared_ptr<internal::Operation> op) {
  Status reject;
  bool report_peer = false;
  const std::string& key = op->request.key;
  const int set = op->request.process_set;
  std::vector<int> members;
  if (!sets_.Get(set, &members)) {
    reject = InvalidArgument("process set " + std::to_string(set) +
                             " does not exist (registered: " + sets_.DescribeIds() +
                             "); create it with add_process_set on every rank first");
  } else if (!std::binary_search(members.begin(), members.end(), comm_.rank())) {
    reject = InvalidArgument("rank " + std::to_string(comm_.rank()) + " is not in process set " +
                             std::to_string(set) + " (ranks " + RanksText(members) +
                             "); only its members can submit to it");
  } else if (op->request.type == OpType::kBroadcast) {
    // The caller names the root by its job rank (as Horovod); the set negotiates with its own.
    const auto it = std::lower_bound(members.begin(), members.end(), op->request.root);
    if (it == members.end() || *it != op->request.root) {
      reject = InvalidArgument("broadcast root rank " + std::to_string(op->request.root) +
                               " is not in process set " + std::to_string(set) + " (ranks " +
                               RanksText(members) + ")");
    } else {
      op->request.root = static_cast<int32_t>(it - members.begin());
    }
  }
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
      report_peer = stopped_by_peer_ && options_.stall_reporter != nullptr;
    } else if (!in_flight_.insert({set, key}).second) {
      reject = InvalidArgument(
          "an operation named '" + key + "' is already in flight on this " +
          (set == 0 ? std::string("rank") : "rank in process set " + std::to_string(set)) +
          "; names must be unique among pending operations (wait for the "
          "first one, or rename)");
    } else {
      queue_.push_back(op);
      if (idle_) wake_cv_.NotifyOne();
      return;
    }
  }
  // Before user code hears of it: this operation fails because another rank shut hvd down.
  if (report_peer) options_.stall_reporter->ReportPeerFailure(kPeerShutdown);
  op->Complete(reject);
}

Status Engine::Stop(std::chrono::milliseconds grace) {
  {
    base::MutexLock lock(&mu_);
    stop_requested_ = true;
    wake_cv_.NotifyOne();
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
  round_start_ = Clock::now();
  while (Round()) {
    // The next tick counts from this round's start, not from the previous tick: rounds woken
    // early by submissions must not push the tick ever further ahead (a busy rank with a request
    // still pending would then sleep for seconds while the others wait for it).
    const auto next = round_start_ + options_.cycle_time;
    auto now = Clock::now();
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
    base::MutexLock lock(&mu_);
    idle_ = idle;
    if (next < now || (!took_new_work_ && others_took_new_work_)) {
      // A long round (big collective) does not owe sleep to later ones. A rank that was given
      // nothing new while others were goes straight to the next round and waits there for them:
      // they keep the cadence (rounds start when the last rank arrives), and it does not make a
      // busy process set wait a tick per operation for ranks outside it.
    } else {
      wake_cv_.WaitUntil(lock, next, [&]() HVD_REQUIRES(mu_) {
        return stop_requested_ || (idle_ && !queue_.empty());
      });
    }
    idle_ = false;
    round_start_ = Clock::now();
  }
  if (timeline_) timeline_->Close();
  base::MutexLock lock(&mu_);
  stopped_ = true;
  stopped_cv_.NotifyAll();
}

EngineStats Engine::stats() const {
  base::MutexLock lock(&stats_mu_);
  EngineStats stats = stats_;
  stats.allreduce_collectives = executor_.allreduce_collectives();
  stats.gpu_nccl_batches = executor_.device().nccl_batches();
  stats.gpu_staged_batches = executor_.device().staged_batches();
  return stats;
}

bool Engine::Round() {
  {
    base::MutexLock lock(&stats_mu_);
    ++stats_.cycles;
  }
  if (timeline_) timeline_->MarkCycle();
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
      {
        base::MutexLock lock(&mu_);
        stopped_by_peer_ = true;
      }
      // Operations pending here fail because of that rank; so will any submitted from now on
      // (Enqueue reports those).
      if (pending && options_.stall_reporter != nullptr) {
        options_.stall_reporter->ReportPeerFailure(who +
                                                   " shut hvd down while this rank still used it");
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

void Engine::Finish(internal::Operation* op, const Status& status) {
  {
    base::MutexLock lock(&mu_);
    in_flight_.erase({op->request.process_set, op->request.key});
  }
  op->Complete(status);
}

Status Engine::RunRound(bool* stop) {
  bool stopping;
  std::vector<std::shared_ptr<internal::Operation>> ops;
  {
    base::MutexLock lock(&mu_);
    stopping = stop_requested_;
    ops.swap(queue_);
  }
  for (auto& op : ops) {
    auto it = runners_.find(op->request.process_set);
    if (it == runners_.end()) {  // removed between Enqueue and now
      Finish(op.get(), Aborted("process set " + std::to_string(op->request.process_set) +
                               " was removed before '" + op->request.key + "' could run"));
      continue;
    }
    it->second->Add(op);
  }
  // Submissions a set took between its own cycles last round count as this round's: ranks outside
  // the set then go straight into the next round instead of sleeping to their tick, and the set
  // does not wait for them when its members come back to the global round.
  took_new_work_ = !ops.empty() || took_set_work_;
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
    const auto start = Clock::now();
    HVD_RETURN_IF_ERROR(runners_.at(0)->Cycle(flags, &agreed));
    sets_start_ = Clock::now();
    last_global_cycle_ = sets_start_ - start;
  }
  if (!(agreed & kNotStopping)) {
    *stop = true;
    return Status::OK();
  }
  others_took_new_work_ = !(agreed & kNoNewWork);
  // The global set's cycle may have added or removed sets: every rank sees the same change in
  // this round, so every member runs the new set's first cycle now.
  std::vector<int> ids;
  for (const auto& [id, runner] : runners_) {
    if (id != 0) ids.push_back(id);
  }
  for (int id : ids) {
    auto it = runners_.find(id);
    if (it == runners_.end()) continue;
    HVD_RETURN_IF_ERROR_CTX(RunSet(it->second.get()), "process set " + std::to_string(id));
  }
  return Status::OK();
}

Status Engine::RunSet(SetRunner* runner) {
  // A tick from the end of the global cycle, not from the round's start: a global cycle that
  // waited long for another set's members must not leave this set one cycle per round.
  const auto tick = sets_start_ + options_.cycle_time;
  bool stay = Clock::now() < tick && TakeSetWork(runner, Clock::time_point::min());
  while (true) {
    uint64_t agreed = 0;
    HVD_RETURN_IF_ERROR(runner->Cycle(stay ? kStayInSet : 0, &agreed));
    if (!(agreed & kStayInSet)) return Status::OK();
    {
      base::MutexLock lock(&stats_mu_);
      ++stats_.set_cycles;
    }
    // Every member runs another cycle. This rank joins it as soon as it has something for the
    // set, or at its tick with nothing (saying it leaves after that cycle).
    stay = TakeSetWork(runner, tick) && Clock::now() < tick;
  }
}

bool Engine::TakeSetWork(SetRunner* runner, Clock::time_point until) {
  std::vector<std::shared_ptr<internal::Operation>> mine;
  bool stay = true;
  {
    base::MutexLock lock(&mu_);
    auto take = [&]() HVD_REQUIRES(mu_) {
      size_t kept = 0;
      for (auto& op : queue_) {
        if (op->request.process_set == runner->id()) {
          mine.push_back(std::move(op));
        } else {
          queue_[kept++] = std::move(op);
        }
      }
      queue_.resize(kept);
    };
    take();
    if (mine.empty() && queue_.empty() && runner->idle() && !stop_requested_) {
      // As the loop between rounds does when idle: a submission ends the wait at once.
      idle_ = true;
      wake_cv_.WaitUntil(lock, until,
                         [&]() HVD_REQUIRES(mu_) { return stop_requested_ || !queue_.empty(); });
      idle_ = false;
      take();
    }
    stay = !stop_requested_ && queue_.empty();
  }
  if (!mine.empty()) took_set_work_ = true;
  for (auto& op : mine) runner->Add(std::move(op));
  return stay;
}

Status Engine::ApplySetChange(const negotiation::Response& r, internal::Operation* op) {
  if (r.type == OpType::kAddProcessSet) {
    std::vector<int> ranks(r.splits.begin(), r.splits.end()), sorted;
    HVD_RETURN_IF_ERROR(ValidateProcessSetRanks(ranks, comm_.size(), &sorted));
    const int existing = sets_.Find(sorted);
    if (existing >= 0) {
      return AlreadyExists("a process set with ranks " + RanksText(sorted) +
                           " already exists (id " + std::to_string(existing) + ")");
    }
    const int id = sets_.Add(sorted);
    if (std::binary_search(sorted.begin(), sorted.end(), comm_.rank())) {
      runners_[id] = NewRunner(id, sorted);
    }
    if (op != nullptr) op->result_id = id;
    HVD_LOG(INFO) << "process set " << id << " added: ranks " << RanksText(sorted);
    return Status::OK();
  }
  const int id = r.root;
  if (id == 0) {
    return InvalidArgument("the global process set (id 0) cannot be removed");
  }
  if (!sets_.Remove(id)) {
    return NotFound("process set " + std::to_string(id) +
                    " does not exist (registered: " + sets_.DescribeIds() + ")");
  }
  auto it = runners_.find(id);
  if (it != runners_.end()) {
    it->second->FailAll(Aborted("process set " + std::to_string(id) +
                                " was removed while this operation was pending"));
    runners_.erase(it);
  }
  executor_.ForgetSet(id);
  HVD_LOG(INFO) << "process set " << id << " removed";
  return Status::OK();
}

}  // namespace hvd::runtime::core
