// WatchJob's fan-out: any number of watchers follow one job, each walking the job's log
// (job_log.h) with a cursor of its own, so the job does not track them. Watchers that wait for
// more sleep on a condition variable of their job's, created while someone waits; every change
// of the job (Job's observer), new output and CloseAll() wake them. Also the wait for every
// job's ranks to be gone (JobManager::WaitRanksGone).
//
// Not thread-safe: its state is guarded by JobManager's lock, which every call holds (the waits
// release it while they sleep).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "base/mutex.h"
#include "launcherd/job.h"

namespace hvd::launcherd {

// Where one WatchJob call stands; starts zeroed.
struct WatchCursor {
  bool started = false;
  int64_t next = 0;               // next JobLog index to send
  int64_t backlog_end = 0;        // the log's end when the watch began
  int64_t output_only_until = 0;  // a resumed watch replays only output before this index
  uint64_t status_sent = 0;       // version of the last status sent
  bool last_was_status = false;
  // The kOutputRenumberedNote went before the first line numbered past a launcher restart (the
  // seq jumps there: JobLog::ContinueFrom), so that the watcher does not count the gap as dropped.
  bool renumbering_said = false;
};

class JobWatch {
 public:
  // `max_output_lines`: the log's bound, named when a watcher missed lines.
  explicit JobWatch(size_t max_output_lines) : max_output_lines_(max_output_lines) {}
  JobWatch(const JobWatch&) = delete;
  JobWatch& operator=(const JobWatch&) = delete;

  // REQUIRES (every method): JobManager's lock is held.

  // A watch's first call: with from_seq 0 the job's whole retained history follows; with
  // from_seq > 0 (resuming a broken watch) the current status now, then the output from from_seq.
  void Begin(const Job& job, int64_t from_seq, WatchCursor* cursor,
             std::vector<JobEvent>* events) const;
  // Waits up to `wait` (releasing `lock`, JobManager's) until the job has something the cursor
  // has not seen, finished, or watches were closed. `job` stays alive: the caller holds it.
  void Wait(base::MutexLock& lock, const Job& job, const WatchCursor& cursor,
            std::chrono::milliseconds wait);
  // Appends what the cursor has not seen (at most a bounded number of events per call). *done:
  // nothing more will come (the job finished and all was yielded; without `follow`, the history
  // was yielded; or CloseAll()); the last event is then always the job's newest status.
  void AddEvents(Job& job, int64_t from_seq, bool follow, WatchCursor* cursor,
                 std::vector<JobEvent>* events, bool* done) const;

  // The job changed or its log grew: wake its watchers.
  void Notify(const std::string& job_id);
  // Ends every watch (after their last events). Idempotent.
  void CloseAll();
  bool closed() const { return closed_; }

  // A job finished: wake WaitFinished.
  void NotifyFinished() { finished_cv_.NotifyAll(); }
  // Waits up to `timeout` (releasing `lock`) until `done()`; returns its last value.
  template <class Predicate>
  bool WaitFinished(base::MutexLock& lock, std::chrono::milliseconds timeout, Predicate done) {
    return finished_cv_.WaitFor(lock, timeout, std::move(done));
  }

 private:
  struct Waiters {
    base::CondVar cv;
    int count = 0;
  };

  const size_t max_output_lines_;
  std::map<std::string, Waiters> waiting_;  // by job id, while someone waits
  base::CondVar finished_cv_;
  bool closed_ = false;
};

}  // namespace hvd::launcherd
