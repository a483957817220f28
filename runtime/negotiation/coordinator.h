// The coordinator runs on rank 0. In a cycle that takes the slow path every rank sends it the
// requests the response cache could not settle; it keeps them in a message table until every
// rank that has not joined has submitted a key, checks that they agree (op, dtype, shape, reduce
// op, scales, root), and answers with a ResponseList that every rank executes in order.
//
// Mismatches become error responses that name each rank and what it gave, so one bad rank fails
// the operation everywhere instead of hanging it.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "negotiation/message.h"
#include "stall/stall_inspector.h"

namespace hvd::runtime::negotiation {

class Coordinator {
 public:
  using Clock = std::chrono::steady_clock;

  // `global_ranks[r]`: the job rank of rank r of the process set this coordinator negotiates,
  // used in every message that names a rank (empty: the global set, where they are equal).
  Coordinator(int size, double stall_check_seconds, double stall_shutdown_seconds,
              std::vector<int> global_ranks = {});
  Coordinator(const Coordinator&) = delete;
  Coordinator& operator=(const Coordinator&) = delete;

  // Records one rank's requests, received at `now`.
  void Add(const RequestList& list, Clock::time_point now);

  // Everything decided this cycle: ready keys in the order they were first submitted, stall
  // failures, and the join release when every rank has joined.
  ResponseList Compute(Clock::time_point now);
  // The stall failures of the last Compute (HVD_STALL_SHUTDOWN_TIME_SECONDS), as their keys stood.
  const std::vector<stall::StallVerdict>& verdicts() const { return verdicts_; }

  // Keys waiting on some rank (for status reports and tests).
  std::vector<stall::PendingKey> Pending() const;
  // Whether some key has waited at least `seconds` on a rank that has not submitted it: what the
  // stall inspector (run by Compute) would warn about or fail.
  bool HasStall(Clock::time_point now, double seconds) const;
  // Whether any key waits here for some rank (HasStall can only be true then).
  bool waiting() const { return !table_.empty(); }
  // The key that has waited longest on missing ranks, when it has waited at least the stall
  // check time (the stall reporter's inspector report); false when none has.
  bool OldestStall(Clock::time_point now, stall::PendingKey* out) const;

 private:
  struct Entry {
    std::vector<std::optional<Request>> by_rank;
    Clock::time_point first_seen;
    uint64_t order = 0;
  };

  bool Ready(const Entry& e) const;
  int Global(int r) const { return global_ranks_.empty() ? r : global_ranks_[r]; }
  Response Build(const std::string& key, const Entry& e) const;

  int size_;
  std::vector<int> global_ranks_;
  std::map<std::string, Entry> table_;
  uint64_t next_order_ = 0;
  std::set<int> joined_;
  int last_joined_ = -1;
  stall::StallInspector stall_;
  std::vector<stall::StallVerdict> verdicts_;
};

}  // namespace hvd::runtime::negotiation
