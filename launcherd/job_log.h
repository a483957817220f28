// One job's event log for WatchJob: output lines (numbered by seq), progress messages and status
// snapshots, in the order they happened, so a watcher sees each status where it happened relative
// to the output. Bounded: past `max_entries` entries or
// `max_bytes` of text the oldest entries are dropped, so a chatty job cannot exhaust the launcher's
// memory. Not thread-safe: the owning JobManager guards it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "launcherd/job_types.h"

namespace hvd::launcherd {

class JobLog {
 public:
  struct Entry {
    enum class Kind { kOutput, kProgress, kStatus };
    Kind kind = Kind::kOutput;
    OutputLine output;     // kOutput
    std::string progress;  // kProgress
    JobStatus status;      // kStatus
    uint64_t version = 0;  // kStatus: the job's status version
  };

  JobLog(size_t max_entries, size_t max_bytes) : max_entries_(max_entries), max_bytes_(max_bytes) {}

  // Numbers the line (its seq) and appends it.
  void AddOutput(OutputLine line);
  void AddProgress(std::string text);
  // The job's status changed; `version` increases with every change.
  void AddStatus(const JobStatus& status, uint64_t version);

  // Entries have increasing indexes; [begin(), end()) are retained.
  int64_t begin() const { return base_; }
  int64_t end() const { return base_ + static_cast<int64_t>(entries_.size()); }
  const Entry& at(int64_t index) const { return entries_[static_cast<size_t>(index - base_)]; }
  // The last `max_lines` stderr lines of `rank` still retained from index `from` on, oldest
  // first, '\n'-separated: what a failure that blames a rank still running (a stall) shows of
  // it, as a rank's exit shows the tail its agent kept.
  std::string StderrTail(int rank, size_t max_lines, int64_t from = 0) const;
  // The index of the first retained output line with seq >= from_seq (end() if none).
  int64_t FirstOutputFrom(int64_t from_seq) const;
  int64_t next_seq() const { return next_seq_; }
  // A watcher has read every entry before `index`.
  void NoteRead(int64_t index) { read_end_ = std::max(read_end_, index); }
  // Numbers the next output line `seq` (a log restored after a launcher restart continues past
  // every number handed out before, so a resuming watcher misses none of the new lines).
  // REQUIRES: the log is empty and seq >= next_seq().
  void ContinueFrom(int64_t seq) { next_seq_ = renumbered_at_ = seq; }
  // Where ContinueFrom jumped (-1: never): the seqs below it a watcher did not get are not lines
  // that were dropped, but numbers never used (and what the launcher held before its restart).
  int64_t renumbered_at() const { return renumbered_at_; }

 private:
  void Trim();

  const size_t max_entries_;
  const size_t max_bytes_;
  size_t bytes_ = 0;
  std::deque<Entry> entries_;
  int64_t base_ = 0;
  int64_t next_seq_ = 0;
  int64_t read_end_ = 0;  // entries before it were read by some watcher
  int64_t renumbered_at_ = -1;
};

}  // namespace hvd::launcherd
