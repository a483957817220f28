// Everything the agent sends upstream except heartbeats, in the order it happened: rank events
// and output lines. Lines are batched (an OutputBatch per job every ~50 ms or 256 lines, at most
// 1 MiB); an event flushes at once together with the lines before it, so a rank's output always
// reaches the launcher before its exit. While the launcher is slow or unreachable lines are
// buffered up to a bound and then the oldest are dropped (and the drop is reported in the
// output); events are never dropped.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

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

  void AddEvent(hvd::v1::RankEvent event);
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
  bool DueLocked(Clock::time_point now) const;
  void DropOldestLineLocked();

  const Limits limits_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool woken_ = false;
  std::deque<Item> items_;
  size_t line_count_ = 0;
  size_t line_bytes_ = 0;
  size_t event_count_ = 0;  // events and put-back messages: due at once
  std::map<std::pair<std::string, int>, size_t> dropped_;  // (job, rank) -> lines dropped
};

}  // namespace hvd::agent
