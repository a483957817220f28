// hvdrun's standard input on its way to the job's stdin rank (hvdrun --stdin, rank 0 by default):
// hvdrun writes it with Launcher.WriteStdin, the agent of that rank reads it with
// AgentGateway.ReadStdin (stdin_service.h) and writes it into the rank's stdin pipe. In between,
// one bounded buffer per job: a writer waits while the buffer is full, so a fast producer and a
// rank that reads slowly (or never) hold at most `capacity` bytes here; gRPC's flow control holds
// hvdrun back in turn. Pure and thread-safe; every wait is bounded by the caller's `wait`.
//
// Restarts (--max-restarts): the reader of the newest attempt wins; an older attempt's reader is
// refused (Aborted). What an attempt's rank had not read when it ended goes to the next attempt's
// rank, except what was already on its way to the old one (at most a pipe and a chunk).
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "base/mutex.h"
#include "hvd/status.h"

namespace hvd::launcherd {

class StdinRelay {
 public:
  explicit StdinRelay(size_t capacity = 1 << 20) : capacity_(capacity) {}
  StdinRelay(const StdinRelay&) = delete;
  StdinRelay& operator=(const StdinRelay&) = delete;

  // Appends `data` once fewer than `capacity` bytes are buffered, waiting up to `wait`. OK: taken;
  // DeadlineExceeded: still full (call again); FailedPrecondition: the job's input was dropped
  // (it ended) or already closed.
  Status Write(const std::string& job, const std::string& data, std::chrono::milliseconds wait);
  // The end of the input: readers get EOF once they have read what is buffered.
  void Close(const std::string& job);
  // Takes up to `max` bytes for the reader of `attempt`, waiting up to `wait` for some. OK with
  // data, or with *eof once the input ended and all was read; DeadlineExceeded: nothing yet;
  // Aborted: a later attempt's reader took over; FailedPrecondition: dropped (the job ended).
  Status Read(const std::string& job, int attempt, size_t max, std::chrono::milliseconds wait,
              std::string* data, bool* eof);
  // Whether nothing written is left to read (or the job's input was dropped).
  bool Drained(const std::string& job) const;
  // The job ended: its buffer is freed and every call for it (blocked or later) fails.
  void Drop(const std::string& job);
  // Forgets every job for which `ended` is true (dropped or not): called when a new job's input
  // starts, so what jobs left behind does not pile up.
  void Prune(const std::function<bool(const std::string& job)>& ended);

  size_t buffered(const std::string& job) const;
  size_t jobs() const;

 private:
  struct Entry {
    std::deque<std::string> chunks;
    size_t bytes = 0;
    bool closed = false;   // the input ended
    bool dropped = false;  // the job ended
    int attempt = -1;      // the newest attempt that read
  };
  // Creates it. Shared: a call waiting on an entry keeps it while Prune erases it.
  std::shared_ptr<Entry> At(const std::string& job) HVD_REQUIRES(mu_);

  const size_t capacity_;
  mutable base::Mutex mu_;
  base::CondVar cv_;
  std::map<std::string, std::shared_ptr<Entry>> jobs_ HVD_GUARDED_BY(mu_);
};

}  // namespace hvd::launcherd
