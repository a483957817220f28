// The engine's process-set side (core/engine.h, "Process sets"): the runner of each set this
// rank belongs to, a set's cycles within a round ("stay in set"), and the set changes the global
// set's cycle negotiates.
#include <algorithm>

#include "base/logging.h"
#include "core/engine.h"
#include "transport/group.h"

namespace hvd::runtime::core {

using Clock = std::chrono::steady_clock;
using negotiation::OpType;

std::unique_ptr<SetRunner> Engine::NewRunner(int id, const std::vector<int>& members) {
  SetRunnerOptions o;
  o.cache_capacity = options_.cache_capacity;
  o.eager_max_bytes = options_.eager_max_bytes;
  o.stall_check_seconds = options_.stall_check_seconds;
  o.stall_shutdown_seconds = options_.stall_shutdown_seconds;
  o.stall_reporter = options_.stall_reporter;
  auto finish = [this](internal::Operation* op, const Status& s) { Finish(op, s); };
  auto apply = [this](const negotiation::Response& r, internal::Operation* op) {
    return ApplySetChange(r, op);
  };
  if (id == 0) {
    std::vector<int> all;
    sets_.Get(0, &all);
    return std::make_unique<SetRunner>(0, all, comm_, nullptr, o, &executor_, timeline_.get(),
                                       &counters_, finish, apply);
  }
  for (int r : members) {
    o.host_members += std::binary_search(options_.host_ranks.begin(), options_.host_ranks.end(), r);
  }
  // A view of the job's transport: the set reuses the links already open between its members.
  std::unique_ptr<transport::Transport> view = transport::NewGroupView(comm_.transport, members);
  collectives::Comm comm = comm_.Over(view.get());
  comm.job_ranks = std::make_shared<const std::vector<int>>(members);
  return std::make_unique<SetRunner>(id, members, comm, std::move(view), o, &executor_,
                                     timeline_.get(), &counters_, finish, apply);
}

Status Engine::RunSets() {
  while (!round_sets_.empty()) {
    const int id = round_sets_.front();
    round_sets_.erase(round_sets_.begin());
    auto it = runners_.find(id);
    if (it == runners_.end()) continue;
    HVD_RETURN_IF_ERROR_CTX(FirstSetCycle(it->second.get()), "process set " + std::to_string(id));
    // Every member stays in the set: its next cycles are the next steps (RunRound), run by the
    // caller waiting for one of its operations or by the background thread, as they come due
    // (RoundDue); the round's later sets follow once the members leave.
    if (stay_set_ >= 0) return Status::OK();
  }
  return Status::OK();
}

Status Engine::FirstSetCycle(SetRunner* runner) {
  // A tick from the end of the global cycle, not from the round's start: a global cycle that
  // waited long for another set's members must not leave this set one cycle per round.
  const auto tick = sets_start_ + options_.cycle_time;
  const bool stay =
      Clock::now() < tick && TakeSetWork(runner) && !CallerWaitsElsewhere(runner->id());
  uint64_t agreed = 0;
  HVD_RETURN_IF_ERROR(runner->Cycle(stay ? kStayInSet : 0, &agreed));
  if (agreed & kStayInSet) {
    stay_set_ = runner->id();
    stay_tick_ = tick;
  }
  return Status::OK();
}

Status Engine::StayCycle(SetRunner* runner) {
  RoundCounters::Add(counters_.set_cycles);
  // This rank says it stays until its tick, unless it has a stop request or a submission for
  // another set (or a caller waits for an operation elsewhere), so that those are not held up.
  const bool stay =
      TakeSetWork(runner) && Clock::now() < stay_tick_ && !CallerWaitsElsewhere(runner->id());
  uint64_t agreed = 0;
  HVD_RETURN_IF_ERROR(runner->Cycle(stay ? kStayInSet : 0, &agreed));
  if (!(agreed & kStayInSet)) stay_set_ = -1;
  return Status::OK();
}

bool Engine::CallerWaitsElsewhere(int set) const {
  return caller_op_ != nullptr && !caller_op_->done() && caller_op_->request.process_set != set;
}

bool Engine::TakeSetWork(SetRunner* runner) {
  std::vector<std::shared_ptr<internal::Operation>> mine;
  bool stay = true;
  {
    base::MutexLock lock(&mu_);
    size_t kept = 0;
    for (auto& op : queue_) {
      // A caller's round leaves device operations to the background thread (RunRound).
      if (op->request.process_set == runner->id() && (caller_op_ == nullptr || !op->on_device())) {
        mine.push_back(std::move(op));
      } else {
        queue_[kept++] = std::move(op);
      }
    }
    queue_.resize(kept);
    stay = !stop_requested_ && queue_.empty();
  }
  if (!mine.empty()) took_set_work_ = true;
  const auto now = mine.empty() ? Clock::time_point() : Clock::now();
  for (auto& op : mine) runner->Add(std::move(op), now);
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
