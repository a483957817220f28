// The stall inspector: on the coordinator, notices keys that some ranks submitted and others did
// not, for longer than HVD_STALL_CHECK_TIME_SECONDS, and says which ranks are missing which
// tensors. With HVD_STALL_SHUTDOWN_TIME_SECONDS > 0, a key stalled that long is failed on every
// rank with the same message (instead of a silent hang, the seeds' main complaint).
#pragma once

#include <chrono>
#include <string>
#include <unordered_map>
#include <vector>

namespace hvd::runtime::stall {

using Clock = std::chrono::steady_clock;

struct PendingKey {
  std::string key;
  std::string op;              // "allreduce", ...
  std::vector<int> submitted;  // ranks that submitted it
  std::vector<int> missing;    // ranks that did not (joined ranks are not missing)
  Clock::time_point first_seen;
  // Another pending key that a missing rank of this one submitted and a submitting rank of this
  // one did not: the ranks wait on each other (FindCrossing). Empty when there is none.
  std::string crossing;
};

// Sets p->crossing to "rank 1 has submitted allreduce 'b', which rank 0 has not" for the oldest
// key of `pending` (p's own among them or not) that crosses p: submitted by one of p's missing
// ranks and missing on one of p's submitting ranks. Synchronous calls in different orders on two
// ranks (rank 0: a then b; rank 1: b then a) leave exactly that, and the oldest key alone would
// blame one side only.
void FindCrossing(const std::vector<PendingKey>& pending, PendingKey* p);
// What a message about p adds for its crossing: "; <crossing>: the ranks wait on each other (...)",
// or "" without one.
std::string CrossingText(const PendingKey& p);

struct StallVerdict {
  PendingKey pending;  // the key failed, as it stood
  // "stalled: rank 2 has not submitted allreduce 'fc1.grad' for 61 s (ranks 0, 1 have); failing
  // it after HVD_STALL_SHUTDOWN_TIME_SECONDS=60"
  std::string message;
};

class StallInspector {
 public:
  // check_seconds <= 0 disables warnings; shutdown_seconds <= 0 disables failing.
  StallInspector(double check_seconds, double shutdown_seconds);

  double check_seconds() const { return check_seconds_; }

  // Logs a warning (at most once per check interval per key) for every key pending longer than
  // the check time, and returns the keys to fail because they passed the shutdown time.
  std::vector<StallVerdict> Inspect(const std::vector<PendingKey>& pending, Clock::time_point now);

  // Forgets a key once it completed or failed.
  void Forget(const std::string& key) { last_warned_.erase(key); }

  static std::string Describe(const PendingKey& p, Clock::time_point now);
  // "HVD_STALL_SHUTDOWN_TIME_SECONDS=60": the setting that fails a stalled key, as set.
  static std::string ShutdownSetting(double shutdown_seconds);

 private:
  double check_seconds_;
  double shutdown_seconds_;
  std::unordered_map<std::string, Clock::time_point> last_warned_;
};

}  // namespace hvd::runtime::stall
