// Everything the agent sends upstream except heartbeats, in the order it happened: rank events
// and output lines. Lines are batched (an OutputBatch per job every ~50 ms or 256 lines, at most
// 1 MiB); an event flushes at once together with the lines before it, so a rank's output always
// reaches the launcher before its exit. While the launcher is slow or unreachable lines are
// buffered up to a bound and then the oldest are dropped (and the drop is reported in the
// output); events are never dropped.
#pragma once

#include <chrono>
#include <deque>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "agent/rank_spec.h"
#include "base/mutex.h"
#include "hvd/v1/agent.pb.h"

namespace hvd::agent {

class Outbox {
 public:
  using Clock = std::chrono::steady_clock;
  struct Limits {
    size_t batch_lines = 256;
    size_t batch_bytes = 1 << 20;  // well under gRPC's default 4 MiB message limit
    std::chrono::milliseconds flush_interval{50};
    size_t max_buffered_bytes = 32 << 20;
  };

  Outbox() : Outbox(Limits{}) {}
  explicit Outbox(Limits limits) : limits_(limits) {}

  // A rank event (hvd.v1.RankEvent on the wire): due at once, never dropped.
  void AddEvent(const RankReport& event);
  // Any other message (a network probe's report): due at once, like an event, never dropped.
  void AddMessage(hvd::v1::AgentMessage message);
  void AddLine(const std::string& job_id, int rank, bool is_stderr, std::string text);

  // The messages to write now, in order, or none when nothing is due yet (`all`: everything).
  std::vector<hvd::v1::AgentMessage> Take(Clock::time_point now, bool all);
  // Messages Take returned that could not be written go back to the front.
  void PutBack(std::vector<hvd::v1::AgentMessage> messages);

  // Waits until something is due, Wake() is called, or `until`.
  void WaitDue(Clock::time_point until);
  void Wake();
  bool empty() const;

 private:
  struct Item {
    std::string job_id;  // for lines
    hvd::v1::OutputLine line;
    bool is_event = false;
    hvd::v1::AgentMessage message;  // an event, or a message put back
    Clock::time_point added;
  };
  bool DueLocked(Clock::time_point now) const HVD_REQUIRES(mu_);
  void DropOldestLineLocked() HVD_REQUIRES(mu_);

  const Limits limits_;
  mutable base::Mutex mu_;
  base::CondVar cv_;
  bool woken_ HVD_GUARDED_BY(mu_) = false;
  std::deque<Item> items_ HVD_GUARDED_BY(mu_);
  size_t line_count_ HVD_GUARDED_BY(mu_) = 0;
  size_t line_bytes_ HVD_GUARDED_BY(mu_) = 0;
  size_t event_count_ HVD_GUARDED_BY(mu_) = 0;  // events and put-back messages: due at once
  // (job, rank) -> lines dropped
  std::map<std::pair<std::string, int>, size_t> dropped_ HVD_GUARDED_BY(mu_);
};

}  // namespace hvd::agent
