// Everything the agent sends upstream except heartbeats, in the order it happened: rank events
// and output lines. Lines are batched (an OutputBatch per job every ~50 ms or 256 lines, at most
// 1 MiB); an event flushes at once together with the lines before it, so a rank's output always
// reaches the launcher before its exit. While the launcher is slow or unreachable lines are
// buffered up to a bound and then the oldest are dropped (and the drop is reported in the
// output); events are never dropped before they are written.
//
// Rank events are numbered (RankEvent.seq, from 1) and kept after they are written until the
// launcher acknowledges them (Ack, RankEventAck): a stream can break after the write and before
// the launcher applied the event. After every registration (Reconnected) the events written but
// not acknowledged go first to the new stream, in seq order. Kept events are bounded
// (Limits::max_unacked_events): beyond it the oldest RUNNING reports are forgotten before any
// exit report, with a log line. Output lines, heartbeats and other messages are not acked.
#pragma once

#include <chrono>
#include <cstdint>
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
    // Events written but not acknowledged that are kept for a resend (each well under 64 KiB).
    size_t max_unacked_events = 16384;
  };

  Outbox() : Outbox(Limits{}) {}
  explicit Outbox(Limits limits) : limits_(limits) {}

  // A rank event (hvd.v1.RankEvent on the wire, numbered): due at once, never dropped before it
  // is written; kept after it until acknowledged. Its seq.
  uint64_t AddEvent(const RankReport& event);
  // Any other message (a network probe's report): due at once, like an event, never dropped.
  void AddMessage(hvd::v1::AgentMessage message);
  void AddLine(const std::string& job_id, int rank, bool is_stderr, std::string text);

  // The messages to write now, in order, or none when nothing is due yet (`all`: everything).
  std::vector<hvd::v1::AgentMessage> Take(Clock::time_point now, bool all);
  // Messages Take returned that could not be written go back to the front.
  void PutBack(std::vector<hvd::v1::AgentMessage> messages);
  // A new stream registered, before anything is written to it: the events written but not
  // acknowledged go to the front, in seq order. `acks`: this launcher acknowledges events
  // (RegisterAck.acks_rank_events); false: they are sent once more, and none is kept after it is
  // written until a launcher that acks registers.
  void Reconnected(bool acks);
  // RankEventAck: every event with seq <= through_seq was applied; they are forgotten.
  void Ack(uint64_t through_seq);
  // Events kept for an ack (written or not).
  size_t unacked() const;

  // Waits until something is due, Wake() is called, or `until`.
  void WaitDue(Clock::time_point until);
  // Waits until Wake() is called or `until`, whatever is due: for a writer with no stream to
  // flush to (waiting for something due would return at once while it is).
  void WaitWoken(Clock::time_point until);
  void Wake();
  bool empty() const;

 private:
  struct Item {
    std::string job_id;  // for lines
    hvd::v1::OutputLine line;
    bool is_event = false;
    hvd::v1::AgentMessage message;  // an event, or a message put back
    uint64_t seq = 0;  // > 0: the rank event unacked_[seq] (gone from there: acked, skipped)
    Clock::time_point added;
  };
  struct Unacked {
    hvd::v1::AgentMessage message;  // a rank_event
    bool queued = true;             // in items_ (not written since it was last queued)
  };
  bool DueLocked(Clock::time_point now) const HVD_REQUIRES(mu_);
  void DropOldestLineLocked() HVD_REQUIRES(mu_);
  void PushFrontLocked(Item item) HVD_REQUIRES(mu_);
  // Forgets written events beyond max_unacked_events: RUNNING reports first, oldest first.
  void TrimUnackedLocked() HVD_REQUIRES(mu_);

  const Limits limits_;
  mutable base::Mutex mu_;
  base::CondVar cv_;
  bool woken_ HVD_GUARDED_BY(mu_) = false;
  std::deque<Item> items_ HVD_GUARDED_BY(mu_);
  size_t line_count_ HVD_GUARDED_BY(mu_) = 0;
  size_t line_bytes_ HVD_GUARDED_BY(mu_) = 0;
  size_t event_count_ HVD_GUARDED_BY(mu_) = 0;  // events and put-back messages: due at once
  bool track_acks_ HVD_GUARDED_BY(mu_) = true;  // until a launcher says it does not ack
  uint64_t next_seq_ HVD_GUARDED_BY(mu_) = 1;
  std::map<uint64_t, Unacked> unacked_ HVD_GUARDED_BY(mu_);  // seq order
  size_t written_unacked_ HVD_GUARDED_BY(mu_) = 0;           // of unacked_, those not queued
  uint64_t trimmed_running_ HVD_GUARDED_BY(mu_) = 0;         // forgotten by TrimUnackedLocked
  uint64_t trimmed_exits_ HVD_GUARDED_BY(mu_) = 0;
  Clock::time_point trim_logged_ HVD_GUARDED_BY(mu_);
  // (job, rank) -> lines dropped
  std::map<std::pair<std::string, int>, size_t> dropped_ HVD_GUARDED_BY(mu_);
};

}  // namespace hvd::agent
