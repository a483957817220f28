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

Status Engine::RunSet(SetRunner* runner) {
  // A tick from the end of the global cycle, not from the round's start: a global cycle that
  // waited long for another set's members must not leave this set one cycle per round.
  const auto tick = sets_start_ + options_.cycle_time;
  // A caller running rounds for its own operation leaves the set once that completed: it would
  // otherwise wait here for work that only it could submit.
  auto caller_done = [this] { return caller_op_ != nullptr && caller_op_->done(); };
  bool stay =
      Clock::now() < tick && !caller_done() && TakeSetWork(runner, Clock::time_point::min());
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
    const bool done = caller_done();
    stay =
        TakeSetWork(runner, done ? Clock::time_point::min() : tick) && !done && Clock::now() < tick;
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
