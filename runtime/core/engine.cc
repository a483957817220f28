#include "core/engine.h"

#include <algorithm>

#include "common/logging.h"
#include "core/control.h"

namespace hvd::runtime::core {

using fusion::OpType;
using fusion::Response;
using fusion::ResponseCache;
using Clock = std::chrono::steady_clock;

constexpr const char* kPeerShutdown = "another rank shut hvd down while this rank still used it";

namespace {

// Flag bits of word 0 of the control vector; AND-reduced, so each says "every rank ...".
constexpr uint64_t kNoUncached = 1;   // ... has nothing for the coordinator
constexpr uint64_t kNotStopping = 2;  // ... wants to go on

size_t Words(uint32_t bits) {
  return (bits + 63) / 64;
}

}  // namespace

Engine::Engine(collectives::Comm comm, EngineOptions options,
               std::unique_ptr<timeline::Timeline> timeline)
    : comm_(comm),
      options_(options),
      timeline_(std::move(timeline)),
      executor_(comm, options.fusion, timeline_.get()),
      cache_(options.cache_capacity) {
  if (comm_.rank() == 0) {
    coordinator_ = std::make_unique<fusion::Coordinator>(comm_.size(), options.stall_check_seconds,
                                                         options.stall_shutdown_seconds);
  }
}

Engine::~Engine() {
  Stop(std::chrono::milliseconds(0));
}

void Engine::Start() {
  thread_ = std::thread([this] { Loop(); });
}

void Engine::Enqueue(std::shared_ptr<internal::Operation> op) {
  Status reject;
  bool report_peer = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const std::string& key = op->request.key;
    // final_status_ is set (with the queue drained) the moment the engine fails or stops, so
    // nothing can be queued after the last drain.
    if (stopped_ || stop_requested_ || !final_status_.ok()) {
      reject = final_status_.ok()
                   ? FailedPrecondition("hvd has been shut down; '" + key + "' was not submitted")
                   : final_status_.WithContext(std::string(fusion::OpTypeName(op->request.type)) +
                                               " '" + key + "' was not submitted");
    } else if (!in_flight_.insert(key).second) {
      reject = InvalidArgument("an operation named '" + key +
                               "' is already in flight on this rank; names must be unique among "
                               "pending operations (wait for the first one, or rename)");
    } else {
      queue_.push_back(op);
      if (idle_) wake_cv_.notify_one();
      return;
    }
    report_peer = stopped_by_peer_ && options_.stall_reporter != nullptr;
  }
  // Before user code hears of it: this operation fails because another rank shut hvd down.
  if (report_peer) options_.stall_reporter->ReportPeerFailure(kPeerShutdown);
  op->Complete(reject);
}

Status Engine::Stop(std::chrono::milliseconds grace) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    stop_requested_ = true;
    wake_cv_.notify_one();
    if (!thread_.joinable()) return final_status_;
    if (!stopped_cv_.wait_for(lock, grace, [&] { return stopped_; })) {
      // Peers did not take part in an orderly stop (dead or stuck): break the links.
      comm_.transport->Abort("this rank is shutting down (hvd::Shutdown)");
    }
  }
  thread_.join();
  std::lock_guard<std::mutex> lock(mu_);
  return final_status_.code() == StatusCode::kAborted ? Status::OK() : final_status_;
}

void Engine::Loop() {
  internal::MarkBackgroundThread();
  auto next = Clock::now();
  while (Cycle()) {
    next += options_.cycle_time;
    auto now = Clock::now();
    if (coordinator_ && options_.stall_reporter != nullptr && now >= next_stall_report_) {
      next_stall_report_ = now + std::chrono::milliseconds(250);
      stall::PendingKey oldest;
      const bool stalled = coordinator_->OldestStall(now, &oldest);
      options_.stall_reporter->SetInspectorReport(stalled, oldest);
    }
    std::unique_lock<std::mutex> lock(mu_);
    idle_ = pending_.empty();
    if (next < now) {
      next = now;  // a long cycle (big collective) does not owe sleep to later ones
    } else {
      wake_cv_.wait_until(lock, next,
                          [&] { return stop_requested_ || (idle_ && !queue_.empty()); });
    }
    idle_ = false;
  }
  if (timeline_) timeline_->Close();
  std::lock_guard<std::mutex> lock(mu_);
  stopped_ = true;
  stopped_cv_.notify_all();
}

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  EngineStats stats = stats_;
  stats.allreduce_collectives = executor_.allreduce_collectives();
  return stats;
}

bool Engine::Cycle() {
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    ++stats_.cycles;
  }
  bool stop = false;
  Status s = RunCycle(&stop);
  if (!s.ok()) {
    HVD_LOG(ERROR) << s.ToString();
    comm_.transport->Abort(s.message());
    // Before user code hears of it: this rank fails because of a peer (launcherd names the rank
    // that failed first as the job's cause, not this one).
    if (options_.stall_reporter != nullptr) options_.stall_reporter->ReportPeerFailure(s.message());
    FailAll(s);
    return false;
  }
  if (stop) {
    bool self_requested, pending;
    {
      std::lock_guard<std::mutex> lock(mu_);
      self_requested = stop_requested_;
      pending = !queue_.empty();
    }
    if (!self_requested) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        stopped_by_peer_ = true;
      }
      // Operations pending here fail because of that rank; so will any submitted from now on
      // (Enqueue reports those).
      if ((pending || !pending_.empty()) && options_.stall_reporter != nullptr) {
        options_.stall_reporter->ReportPeerFailure(kPeerShutdown);
      }
    }
    // Later submissions are told what happened without the claim that they were pending.
    FailAll(Aborted("hvd was shut down (hvd::Shutdown on some rank) while this operation was "
                    "pending"),
            Aborted("hvd was shut down (hvd::Shutdown on some rank); nothing can be submitted "
                    "until hvd::Init() is called again"));
    return false;
  }
  return true;
}

void Engine::FailAll(const Status& status, const Status& later) {
  std::vector<std::shared_ptr<internal::Operation>> ops;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (final_status_.ok()) final_status_ = later.ok() ? status : later;
    for (auto& op : queue_) ops.push_back(op);
    queue_.clear();
    in_flight_.clear();
  }
  for (auto& [key, p] : pending_) ops.push_back(p.op);
  pending_.clear();
  for (auto& op : ops) {
    if (timeline_) {
      for (const auto& t : op->request.tensors) timeline_->End(t.name, status);
    }
    op->Complete(status);
  }
}

void Engine::Finish(const std::string& key, const Status& status) {
  auto it = pending_.find(key);
  if (it == pending_.end()) return;
  std::shared_ptr<internal::Operation> op = std::move(it->second.op);
  pending_.erase(it);
  {
    std::lock_guard<std::mutex> lock(mu_);
    in_flight_.erase(key);
  }
  if (timeline_) {
    for (const auto& t : op->request.tensors) timeline_->End(t.name, status);
  }
  op->Complete(status);
}

// Decides, for every pending request not yet sent to the coordinator, whether it can take the
// cached path.
void Engine::Classify(std::vector<uint32_t>* invalidate) {
  const auto now = Clock::now();
  // A cached request waiting this long is stalled on another rank: move it to the coordinator so
  // the stall inspector can name who is missing (check time) or fail it (shutdown time). Either
  // setting alone must reach the coordinator: with warnings off (check 0) a stalled cached
  // request would otherwise wait forever, never seeing HVD_STALL_SHUTDOWN_TIME_SECONDS.
  double stall_s = 0;
  for (double t : {options_.stall_check_seconds, options_.stall_shutdown_seconds}) {
    if (t > 0 && (stall_s == 0 || t < stall_s)) stall_s = t;
  }
  const auto stall_after = std::chrono::duration<double>(stall_s);
  const bool joined = joined_self();
  for (auto& [key, p] : pending_) {
    if (p.state == State::kSent) continue;
    if (p.state == State::kCached && p.generation == cache_.generation()) {
      // A joined rank's own requests (submitted before it joined) must not run from the cache:
      // its wildcard bits would make the others count it as not contributing. Through the
      // coordinator the response counts it (Response::contributors).
      if (joined || (stall_s > 0 && now - p.enqueued >= stall_after)) {
        invalidate->push_back(p.slot);
      }
      continue;
    }
    const fusion::Request& req = p.op->request;
    uint32_t slot = 0;
    switch (req.type == OpType::kJoin || req.type == OpType::kBarrier ||
                    req.type == OpType::kAlltoall
                ? ResponseCache::Match::kMiss
                : cache_.Lookup(req, comm_.rank(), &slot)) {
      case ResponseCache::Match::kHit:
        if (joined) {  // as above
          invalidate->push_back(slot);
          p.state = State::kNew;
          break;
        }
        p.state = State::kCached;
        p.slot = slot;
        p.generation = cache_.generation();
        break;
      case ResponseCache::Match::kStale:
        invalidate->push_back(slot);
        p.state = State::kNew;
        break;
      case ResponseCache::Match::kMiss:
        p.state = State::kNew;
        break;
    }
  }
}

Status Engine::RunCycle(bool* stop) {
  bool stopping;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping = stop_requested_;
    for (auto& op : queue_) {
      Pending p;
      p.op = op;
      p.enqueued = Clock::now();
      if (timeline_) {
        for (const auto& t : op->request.tensors) {
          timeline_->NegotiateStart(t.name, fusion::OpTypeName(op->request.type));
        }
      }
      pending_.emplace(op->request.key, std::move(p));
    }
    queue_.clear();
  }

  std::vector<uint32_t> invalidate;
  Classify(&invalidate);

  // [flags | hit bits | ~invalidate bits]
  const size_t words = Words(cache_.used_slots());
  std::vector<uint64_t> bits(1 + 2 * words, 0);
  bool uncached = false;
  for (const auto& [key, p] : pending_) {
    if (p.state == State::kNew) uncached = true;
    if (p.state == State::kCached) bits[1 + p.slot / 64] |= uint64_t{1} << (p.slot % 64);
  }
  if (joined_self()) {
    // A joined rank is ready for anything the others are.
    for (uint32_t s = 0; s < cache_.used_slots(); ++s) {
      if (cache_.Occupied(s)) bits[1 + s / 64] |= uint64_t{1} << (s % 64);
    }
  }
  for (size_t w = 0; w < words; ++w) bits[1 + words + w] = ~uint64_t{0};
  for (uint32_t s : invalidate) bits[1 + words + s / 64] &= ~(uint64_t{1} << (s % 64));
  bits[0] = (uncached ? 0 : kNoUncached) | (stopping ? 0 : kNotStopping);

  HVD_RETURN_IF_ERROR(AndAllreduce(comm_, &bits));

  if (!(bits[0] & kNotStopping)) {
    *stop = true;
    return Status::OK();
  }

  // Invalidations first, so no rank runs a slot another rank has given up on.
  std::vector<Response> hits;
  bool erased = false;
  for (uint32_t s = 0; s < words * 64; ++s) {
    const bool invalid = !(bits[1 + words + s / 64] & (uint64_t{1} << (s % 64)));
    if (invalid && cache_.Occupied(s)) {
      cache_.Erase(s);
      erased = true;
    }
  }
  for (uint32_t s = 0; s < words * 64; ++s) {
    if ((bits[1 + s / 64] & (uint64_t{1} << (s % 64))) && cache_.Occupied(s)) {
      hits.push_back(cache_.Get(s));
      // Run from the cache, every rank that has not joined contributes (joined ranks never take
      // the cache path for their own requests); the count recorded at negotiation may be stale.
      hits.back().contributors = 0;
      cache_.Touch(s);
    }
  }
  if (erased) RefreshAfterCacheChange();
  if (!hits.empty()) {
    {
      std::lock_guard<std::mutex> lock(stats_mu_);
      stats_.cache_hits += hits.size();
    }
    if (timeline_) {
      for (const auto& r : hits) {
        for (const auto& t : r.tensors) timeline_->NegotiateEnd(t.name);
      }
    }
    HVD_RETURN_IF_ERROR(Run(hits));
  }

  if (!(bits[0] & kNoUncached)) {
    HVD_RETURN_IF_ERROR(SlowPath());
  }
  return Status::OK();
}

// After slots changed, requests that were waiting on a slot must look it up again: the slot may
// now hold another key, or none.
void Engine::RefreshAfterCacheChange() {
  for (auto& [key, p] : pending_) {
    if (p.state == State::kCached && !(cache_.Occupied(p.slot) && cache_.Get(p.slot).key == key)) {
      p.state = State::kNew;
    }
  }
}

Status Engine::SlowPath() {
  fusion::RequestList mine;
  mine.rank = comm_.rank();
  const auto now = Clock::now();
  for (auto& [key, p] : pending_) {
    if (p.state != State::kNew) continue;
    fusion::Request req = p.op->request;
    req.rank = comm_.rank();
    req.age_ms = std::chrono::duration_cast<std::chrono::milliseconds>(now - p.enqueued).count();
    mine.requests.push_back(std::move(req));
    p.state = State::kSent;
  }

  std::vector<std::string> all;
  HVD_RETURN_IF_ERROR(GatherToRoot(comm_, fusion::Encode(mine), &all));
  std::string answer;
  if (coordinator_) {
    const auto arrival = Clock::now();
    for (int r = 0; r < comm_.size(); ++r) {
      fusion::RequestList list;
      HVD_RETURN_IF_ERROR_CTX(fusion::Decode(all[r], &list),
                              "negotiation: requests from rank " + std::to_string(r));
      if (timeline_) {
        for (const auto& req : list.requests) {
          for (const auto& t : req.tensors) timeline_->NegotiateRankReady(t.name, r);
        }
      }
      coordinator_->Add(list, arrival);
    }
    answer = fusion::Encode(coordinator_->Compute(Clock::now()));
  }
  HVD_RETURN_IF_ERROR(BroadcastFromRoot(comm_, &answer));
  fusion::ResponseList list;
  HVD_RETURN_IF_ERROR(fusion::Decode(answer, &list));

  // The coordinator decided this list with the joined set it sends along, so averages in it
  // divide by the ranks that were not joined then. (A join release empties the set in the same
  // list that carries the release.)
  std::set<int> joined(list.joined_ranks.begin(), list.joined_ranks.end());
  if (joined != joined_) {
    joined_ = std::move(joined);
    // Allgather's cached row counts assumed the old set of contributing ranks. A cached broadcast
    // whose root has now joined must not run from the cache either: the joined root would
    // wildcard its slot and send its scratch buffer; renegotiated, it fails with the
    // coordinator's "root rank R has joined" error instead.
    cache_.EraseType(OpType::kAllgather);
    cache_.EraseType(OpType::kBroadcast);
    RefreshAfterCacheChange();
  }
  if (timeline_) {
    for (const auto& r : list.responses) {
      for (const auto& t : r.tensors) timeline_->NegotiateEnd(t.name);
    }
  }
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    ++stats_.slow_path_cycles;
    stats_.negotiated += list.responses.size();
  }
  HVD_RETURN_IF_ERROR(Run(list.responses));
  for (const Response& r : list.responses) {
    if (ResponseCache::Cacheable(r)) cache_.Put(r);
  }
  RefreshAfterCacheChange();
  return Status::OK();
}

Status Engine::Run(const std::vector<Response>& responses) {
  const int contributors = comm_.size() - static_cast<int>(joined_.size());
  auto lookup = [this](const std::string& key) -> internal::Operation* {
    auto it = pending_.find(key);
    return it == pending_.end() ? nullptr : it->second.op.get();
  };
  auto finish = [this](const std::string& key, const Status& s) { Finish(key, s); };
  return executor_.Execute(responses, contributors, lookup, finish);
}

}  // namespace hvd::runtime::core
