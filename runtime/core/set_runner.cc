#include "core/set_runner.h"

#include <algorithm>

#include "core/engine.h"
#include "negotiation/exchange.h"

namespace hvd::runtime::core {

using negotiation::AndAllreduce;
using negotiation::BroadcastFromRoot;
using negotiation::GatherToRoot;
using negotiation::OpType;
using negotiation::Response;
using negotiation::ResponseCache;
using Clock = std::chrono::steady_clock;

namespace {

size_t Words(uint32_t bits) {
  return (bits + 63) / 64;
}

// Slot s's bit in its word of the control vector.
uint64_t Bit(uint32_t s) {
  return uint64_t{1} << (s % 64);
}

// Operations negotiated through the coordinator every time: their per-call data differs
// (alltoall's splits, a byte broadcast's size) or they have none worth caching.
bool NeverCached(const negotiation::Request& req) {
  switch (req.type) {
    case OpType::kJoin:
    case OpType::kBarrier:
    case OpType::kAlltoall:
    case OpType::kAddProcessSet:
    case OpType::kRemoveProcessSet:
      return true;
    case OpType::kBroadcast:
      return req.sized_by_root;
    default:
      return false;
  }
}

// The shortest positive of the stall check and shutdown times (0: stall inspection is off).
double StallSeconds(const SetRunnerOptions& o) {
  double stall_s = 0;
  for (double t : {o.stall_check_seconds, o.stall_shutdown_seconds}) {
    if (t > 0 && (stall_s == 0 || t < stall_s)) stall_s = t;
  }
  return stall_s;
}

}  // namespace

SetRunner::SetRunner(int id, std::vector<int> members, collectives::Comm comm,
                     std::unique_ptr<transport::Transport> view, const SetRunnerOptions& options,
                     Executor* executor, timeline::Timeline* timeline, RoundCounters* counters,
                     Finish finish, ApplySetChange apply)
    : id_(id),
      members_(std::move(members)),
      view_(std::move(view)),
      comm_(comm),
      options_(options),
      executor_(executor),
      timeline_(timeline),
      counters_(counters),
      finish_(std::move(finish)),
      apply_(std::move(apply)),
      cache_(options.cache_capacity) {
  if (comm_.rank() == 0) {
    coordinator_ = std::make_unique<negotiation::Coordinator>(
        comm_.size(), options.stall_check_seconds, options.stall_shutdown_seconds,
        id_ == 0 ? std::vector<int>{} : members_);
  }
}

void SetRunner::Add(std::shared_ptr<internal::Operation> op, Clock::time_point now) {
  timeline::ScopedProcessSet timeline_rows(id_);
  Pending p;
  p.op = op;
  p.enqueued = now;
  if (timeline_) {
    for (const auto& t : op->request.tensors) {
      timeline_->NegotiateStart(t.name, negotiation::OpTypeName(op->request.type));
    }
  }
  if (spare_.empty()) {
    pending_.emplace(op->request.key, std::move(p));
    return;
  }
  // A node a completed operation left: its key's memory is reused (no allocation per operation).
  auto node = std::move(spare_.back());
  spare_.pop_back();
  node.key().assign(op->request.key);
  node.mapped() = std::move(p);
  pending_.insert(std::move(node));
}

void SetRunner::FailAll(const Status& status) {
  timeline::ScopedProcessSet timeline_rows(id_);
  std::map<std::string, Pending> pending;
  pending.swap(pending_);
  for (auto& [key, p] : pending) {
    if (timeline_) {
      for (const auto& t : p.op->request.tensors) timeline_->End(t.name, status);
    }
    finish_(p.op.get(), status);
  }
}

void SetRunner::Complete(const std::string& key, const Status& status) {
  auto it = pending_.find(key);
  if (it == pending_.end()) return;
  std::shared_ptr<internal::Operation> op = std::move(it->second.op);
  auto node = pending_.extract(it);
  if (spare_.size() < kSpareNodes) spare_.push_back(std::move(node));
  if (timeline_) {
    for (const auto& t : op->request.tensors) timeline_->End(t.name, status);
  }
  // This set moves again (not merely the cycle that failed the stalled key, whose other
  // responses complete after it): what was said of the stall is withdrawn.
  if (stall_failed_ && status.ok() && cycles_ > stall_cycle_) {
    stall_failed_ = false;
    options_.stall_reporter->Progress();
  }
  finish_(op.get(), status);
}

bool SetRunner::OldestStall(Clock::time_point now, stall::PendingKey* out) const {
  return coordinator_ != nullptr && coordinator_->OldestStall(now, out);
}

// Decides, for every pending request not yet sent to the coordinator, whether it can take the
// cached path.
void SetRunner::Classify(std::vector<uint32_t>* invalidate) {
  // Read once, and only for a request cached in an earlier cycle: a new one (the usual case of a
  // small synchronous operation) needs no clock, whose read is a measurable part of it.
  Clock::time_point now{};
  auto waited = [&](const Pending& p) {
    if (now == Clock::time_point{}) now = Clock::now();
    return now - p.enqueued;
  };
  // A cached request waiting this long is stalled on another rank: move it to the coordinator so
  // the stall inspector can name who is missing (check time) or fail it (shutdown time). Either
  // setting alone must reach the coordinator: with warnings off (check 0) a stalled cached
  // request would otherwise wait forever, never seeing HVD_STALL_SHUTDOWN_TIME_SECONDS.
  const double stall_s = StallSeconds(options_);
  const auto stall_after = std::chrono::duration<double>(stall_s);
  const bool joined = joined_self();
  for (auto& [key, p] : pending_) {
    if (p.state == State::kSent) continue;
    if (p.state == State::kCached && p.generation == cache_.generation()) {
      // A joined rank's own requests (submitted before it joined) must not run from the cache:
      // its wildcard bits would make the others count it as not contributing. Through the
      // coordinator the response counts it (Response::contributors).
      if (joined || (stall_s > 0 && waited(p) >= stall_after)) {
        invalidate->push_back(p.slot);
      }
      continue;
    }
    const negotiation::Request& req = p.op->request;
    uint32_t slot = 0;
    switch (NeverCached(req) ? ResponseCache::Match::kMiss
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

// The control vector, [flags | hit bits | ~invalidate bits], into bits_; whether some request of
// this rank goes to the coordinator this cycle.
bool SetRunner::ReadyBits(uint64_t flags) {
  invalidate_.clear();
  Classify(&invalidate_);
  const size_t words = Words(cache_.used_slots());
  std::vector<uint64_t>& bits = bits_;
  bits.assign(1 + 2 * words, 0);
  bool uncached = false;
  for (const auto& [key, p] : pending_) {
    if (p.state == State::kNew) uncached = true;
    if (p.state == State::kCached) bits[1 + p.slot / 64] |= Bit(p.slot);
  }
  if (joined_self()) {
    // A joined rank is ready for anything the others are.
    for (uint32_t s = 0; s < cache_.used_slots(); ++s) {
      if (cache_.Occupied(s)) bits[1 + s / 64] |= Bit(s);
    }
  }
  for (size_t w = 0; w < words; ++w) bits[1 + words + w] = ~uint64_t{0};
  for (uint32_t s : invalidate_) bits[1 + words + s / 64] &= ~Bit(s);
  // The coordinator inspects stalls only when it computes, i.e. in a slow path. Once every
  // member's requests have been sent, a key that some member never submits would start none: it
  // would never be warned about nor failed at HVD_STALL_SHUTDOWN_TIME_SECONDS. So while keys wait
  // past the stall time, the set's first member asks for a slow path now and then.
  if (coordinator_ != nullptr && !uncached && coordinator_->waiting()) {  // (else no clock read)
    const double stall_s = StallSeconds(options_);
    const auto now = Clock::now();
    if (stall_s > 0 && now >= next_inspection_ && coordinator_->HasStall(now, stall_s)) {
      uncached = true;
      next_inspection_ = now + std::chrono::duration_cast<Clock::duration>(
                                   std::chrono::duration<double>(std::min(1.0, stall_s / 10)));
    }
  }
  bits[0] = (flags & ~kNoUncached) | (uncached ? 0 : kNoUncached);
  return uncached;
}

// From the agreed bits_: erases the slots some member gave up on (first, so that no rank runs a
// slot another has given up on), then puts the slots every member is ready for, in slot order,
// into hits_ (assigned over the last cycle's responses, whose memory they reuse; not at all where
// the last cycle's hit at that place was the same slot and the cache has not changed since: a
// steady state copies no response, each copy being a measurable part of a small operation).
void SetRunner::TakeHits() {
  const size_t words = (bits_.size() - 1) / 2;
  // Slot by slot over the set bits only (a steady state has one or a few of them).
  auto each = [](uint64_t word, size_t w, auto&& fn) {
    for (; word != 0; word &= word - 1) fn(static_cast<uint32_t>(w * 64 + __builtin_ctzll(word)));
  };
  bool erased = false;
  for (size_t w = 0; w < words; ++w) {
    each(~bits_[1 + words + w], w, [&](uint32_t s) {
      if (cache_.Occupied(s)) {
        cache_.Erase(s);
        erased = true;
      }
    });
  }
  const uint64_t generation = cache_.generation();
  size_t n = 0;
  for (size_t w = 0; w < words; ++w) {
    each(bits_[1 + w], w, [&](uint32_t s) {
      if (!cache_.Occupied(s)) return;
      if (n == hits_.size()) {
        hits_.emplace_back();
        hit_slots_.push_back(kNoSlot);
      }
      if (hit_slots_[n] != s || hits_generation_ != generation) {
        hits_[n] = cache_.Get(s);
        // Run from the cache, every rank that has not joined contributes (joined ranks never
        // take the cache path for their own requests); the count recorded at negotiation may be
        // stale.
        hits_[n].contributors = 0;
        hit_slots_[n] = s;
      }
      ++n;
      cache_.Touch(s);
    });
  }
  hits_.resize(n);
  hit_slots_.resize(n);
  hits_generation_ = generation;
  if (erased) RefreshAfterCacheChange();
}

// Whether the rider's operation runs on the data that came with the bits: when it is all this
// cycle runs from the cache and every member sent its input for it. The same on every member
// (the agreed bits, the cache and every member's rider tag are).
bool SetRunner::RunsOnRiders(const negotiation::Rider& rider) const {
  const uint32_t slot = rider.tag - 1;
  if (rider.tag == 0 || hits_.size() != 1 || !cache_.Occupied(slot) ||
      !(bits_[1 + slot / 64] & Bit(slot))) {
    return false;
  }
  for (const negotiation::Rider& r : riders_.from) {
    if (r.tag != rider.tag || r.bytes != rider.bytes) return false;
  }
  return true;
}

Status SetRunner::Cycle(uint64_t flags, uint64_t* agreed) {
  timeline::ScopedProcessSet timeline_rows(id_);
  transport::ScopedSpinRanks spin_ranks(options_.host_members);
  ++cycles_;
  const bool uncached = ReadyBits(flags);
  const negotiation::Rider rider = uncached ? negotiation::Rider{} : RiderOf();
  HVD_RETURN_IF_ERROR(AndAllreduce(comm_, &bits_, &rider, &riders_));
  *agreed = bits_[0];
  if (id_ == 0 && !(bits_[0] & kNotStopping)) return Status::OK();

  TakeHits();
  if (!hits_.empty()) {
    const bool eager = RunsOnRiders(rider);
    RoundCounters::Add(counters_->cache_hits, hits_.size());
    if (eager) RoundCounters::Add(counters_->eager_allreduces);
    if (timeline_) {
      for (const auto& r : hits_) {
        for (const auto& t : r.tensors) timeline_->NegotiateEnd(t.name);
      }
    }
    if (eager) {
      const collectives::Gathered gathered{riders_.base, negotiation::kMaxRiderBytes, rider.bytes};
      collectives::Comm with_data = comm_;
      with_data.gathered = &gathered;
      HVD_RETURN_IF_ERROR(Run(hits_, with_data));
    } else {
      HVD_RETURN_IF_ERROR(Run(hits_, comm_));
    }
  }

  if (!(bits_[0] & kNoUncached)) {
    HVD_RETURN_IF_ERROR(SlowPath());
  }
  return Status::OK();
}

// After slots changed, requests that were waiting on a slot must look it up again: the slot may
// now hold another key, or none.
void SetRunner::RefreshAfterCacheChange() {
  for (auto& [key, p] : pending_) {
    if (p.state == State::kCached && !(cache_.Occupied(p.slot) && cache_.Get(p.slot).key == key)) {
      p.state = State::kNew;
    }
  }
}

Status SetRunner::SlowPath() {
  negotiation::RequestList mine;
  mine.rank = comm_.rank();
  const auto now = Clock::now();
  for (auto& [key, p] : pending_) {
    if (p.state != State::kNew) continue;
    negotiation::Request req = p.op->request;
    req.rank = comm_.rank();
    req.age_ms = std::chrono::duration_cast<std::chrono::milliseconds>(now - p.enqueued).count();
    mine.requests.push_back(std::move(req));
    p.state = State::kSent;
  }

  std::vector<std::string> all;
  HVD_RETURN_IF_ERROR(GatherToRoot(comm_, negotiation::Encode(mine), &all));
  std::string answer;
  if (coordinator_) {
    const auto arrival = Clock::now();
    for (int r = 0; r < comm_.size(); ++r) {
      negotiation::RequestList list;
      HVD_RETURN_IF_ERROR_CTX(negotiation::Decode(all[r], &list),
                              "negotiation: requests from rank " + std::to_string(members_[r]));
      if (timeline_) {
        for (const auto& req : list.requests) {
          for (const auto& t : req.tensors) timeline_->NegotiateRankReady(t.name, members_[r]);
        }
      }
      coordinator_->Add(list, arrival);
    }
    answer = negotiation::Encode(coordinator_->Compute(Clock::now()));
    if (options_.stall_reporter != nullptr) {
      for (const stall::StallVerdict& v : coordinator_->verdicts()) {
        options_.stall_reporter->ReportVerdict(
            v.pending, stall::StallInspector::ShutdownSetting(options_.stall_shutdown_seconds));
        StallFailed();
      }
    }
  }
  HVD_RETURN_IF_ERROR(BroadcastFromRoot(comm_, &answer));
  negotiation::ResponseList list;
  HVD_RETURN_IF_ERROR(negotiation::Decode(answer, &list));

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
  RoundCounters::Add(counters_->slow_path_cycles);
  RoundCounters::Add(counters_->negotiated, list.responses.size());
  HVD_RETURN_IF_ERROR(Run(list.responses, comm_));
  for (const Response& r : list.responses) {
    if (ResponseCache::Cacheable(r)) cache_.Put(r);
  }
  RefreshAfterCacheChange();
  return Status::OK();
}

// What rides with this cycle's ready bits: the input of the one operation pending, when it is a
// host allreduce found in the cache that the direct path would run as it is (no prescale: the
// bytes sent are the bytes reduced). With anything else pending, the round runs more than this
// one operation (or another alone), and the data would be sent for nothing. An operation waiting
// for late peers rides in its cycles 0, 1, 2, 4, 8, ... only: a rank that waits a long time
// (a peer still computing) sends its data a logarithmic number of times, not once per cycle.
negotiation::Rider SetRunner::RiderOf() {
  if (options_.eager_max_bytes == 0 || pending_.size() != 1 || joined_self() ||
      comm_.size() > negotiation::kDirectAndMaxRanks || comm_.hierarchy != nullptr) {
    return {};
  }
  Pending& p = pending_.begin()->second;
  const negotiation::Request& req = p.op->request;
  if (p.state != State::kCached || p.generation != cache_.generation() ||
      req.type != OpType::kAllreduce || req.gpu || req.tensors.size() != 1 ||
      req.reduce_op == ReduceOp::kAdasum || req.prescale != 1.0 || p.op->inputs.size() != 1) {
    return {};
  }
  const size_t bytes =
      static_cast<size_t>(req.tensors[0].num_elements()) * DataTypeSize(req.tensors[0].dtype);
  if (bytes == 0 || bytes > options_.eager_max_bytes || !collectives::UseDirect(comm_, bytes)) {
    return {};
  }
  const uint32_t cycle = p.rider_cycles++;
  if ((cycle & (cycle - 1)) != 0) return {};
  return {p.slot + 1, static_cast<uint32_t>(bytes), p.op->inputs[0].data};
}

Status SetRunner::Run(const std::vector<Response>& responses, const collectives::Comm& comm) {
  // A key failed because other ranks never submitted it: before user code hears of it, the
  // launcher learns that this rank's failure is theirs (it then names them, not this rank).
  if (options_.stall_reporter != nullptr) {
    for (const Response& r : responses) {
      if (!r.stalled_ranks.empty() && pending_.count(r.key) != 0) {
        options_.stall_reporter->ReportStallFailure(r.error);
        StallFailed();
        break;
      }
    }
  }
  // Process-set changes are the engine's: applied here, in response order, on every rank. The
  // other responses go to the executor as they are, without a copy, when there are none.
  auto set_change = [](const Response& r) {
    return r.type == OpType::kAddProcessSet || r.type == OpType::kRemoveProcessSet;
  };
  const bool any_set_change = std::any_of(responses.begin(), responses.end(), set_change);
  std::vector<Response> collectives;
  if (any_set_change) {
    for (const Response& r : responses) {
      if (!set_change(r)) {
        collectives.push_back(r);
        continue;
      }
      auto it = pending_.find(r.key);
      internal::Operation* op = it == pending_.end() ? nullptr : it->second.op.get();
      Status s = r.ok() ? apply_(r, op) : Aborted(r.error);
      if (op != nullptr) Complete(r.key, s);
    }
  }
  const std::vector<Response>& run = any_set_change ? collectives : responses;
  if (run.empty()) return Status::OK();
  const int contributors = comm_.size() - static_cast<int>(joined_.size());
  auto lookup = [this](const std::string& key) -> internal::Operation* {
    auto it = pending_.find(key);
    return it == pending_.end() ? nullptr : it->second.op.get();
  };
  auto finish = [this](const std::string& key, const Status& s) { Complete(key, s); };
  return executor_->Execute(id_, comm, run, contributors, lookup, finish);
}

}  // namespace hvd::runtime::core
