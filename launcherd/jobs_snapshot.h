// What readers see of the job table: an immutable snapshot the JobManager publishes, so that the
// REST endpoint, the metrics and the gRPC reads (ListJobs, GetJob, ListAgents) never wait for the
// manager's lock while agents' reports keep it busy (issue 22: /v1/jobs took seconds at a
// thousand agents because every handler queued behind OnRankEvent).
//
// Freshness: a snapshot reflects every change up to its `version` (the manager's count of job
// changes). The manager publishes at once when a change arrives after a quiet moment, and under a
// steady stream of changes at most every kPublishInterval, so a reader sees data at most that old
// (plus one build) while the manager is busy. When the manager is idle a reader that finds its
// snapshot stale publishes a fresh one itself (JobManager::Snapshot, try-lock: never waits), and
// Submit and Cancel publish before they return: a client reads its own writes.
//
// Cost: a build walks the table (O(jobs)) and copies only the jobs whose version changed since
// the previous build; the slot counts walk the live ranks. Builds run at most every
// kPublishInterval, so per rank event the cost is O(1) amortized, never O(all jobs).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/mutex.h"
#include "base/thread_annotations.h"
#include "launcherd/job.h"

namespace hvd::launcherd {

struct JobCounts {
  std::map<JobState, int> jobs;
  int ranks_running = 0;
  std::map<std::string, int> slots_in_use;  // agent id -> live ranks there
};

// Under load, snapshots are published at most this often (readers see data up to this old).
constexpr std::chrono::milliseconds kPublishInterval{50};

struct JobsSnapshot {
  uint64_t version = 0;  // the manager's change count this snapshot reflects
  // Submit order; `jobs` with their ranks (GetJob), `summaries` without (List, ListJobs).
  std::vector<std::shared_ptr<const JobStatus>> jobs;
  std::vector<std::shared_ptr<const JobStatus>> summaries;
  JobCounts counts;
  // The job with this id (with its ranks), or null.
  const JobStatus* Find(const std::string& id) const;

 private:
  friend class JobsSnapshotBuilder;
  std::unordered_map<std::string, size_t> index_;  // id -> position in jobs
};

// Builds snapshots from the table, reusing what it built before for jobs that did not change
// (Job::version and Job::finished unchanged). Holds no lock: the manager calls it under its own.
class JobsSnapshotBuilder {
 public:
  std::shared_ptr<const JobsSnapshot> Build(const std::vector<std::shared_ptr<Job>>& jobs,
                                            uint64_t version);

 private:
  struct Entry {
    const Job* job = nullptr;  // an id reused by another Job object is rebuilt
    uint64_t job_version = 0;
    bool finished = false;
    std::shared_ptr<const JobStatus> full, summary;
    int ranks_running = 0;
    std::map<std::string, std::vector<int>> live_slots;  // agent id -> slots (unfinished jobs)
  };
  std::unordered_map<std::string, Entry> cache_;
};

// The current snapshot (swapped under a small mutex of its own, never the manager's), the count
// of changes, and the thread that publishes after changes, at most every kPublishInterval.
class SnapshotPublisher {
 public:
  // `publish` takes the manager's lock and calls its PublishLocked; run on the thread.
  explicit SnapshotPublisher(std::function<void()> publish);
  ~SnapshotPublisher();
  SnapshotPublisher(const SnapshotPublisher&) = delete;
  SnapshotPublisher& operator=(const SnapshotPublisher&) = delete;

  // A job changed (called under the manager's lock, on every change: an atomic add; the first
  // change after a publish also wakes the thread).
  void Changed();
  // Called under the manager's lock as a build begins: the change count it will reflect.
  uint64_t BeginBuild();
  void Swap(std::shared_ptr<const JobsSnapshot> snapshot) HVD_EXCLUDES(mu_);
  std::shared_ptr<const JobsSnapshot> Current() const HVD_EXCLUDES(mu_);
  // A change happened after `snapshot` was built.
  bool Stale(const JobsSnapshot& snapshot) const {
    return snapshot.version != changes_.load(std::memory_order_acquire);
  }

 private:
  void Loop();

  const std::function<void()> publish_;
  std::atomic<uint64_t> changes_{0};
  std::atomic<bool> pending_{false};  // changed since the last BeginBuild
  mutable base::Mutex mu_;
  base::CondVar cv_;
  std::shared_ptr<const JobsSnapshot> current_ HVD_GUARDED_BY(mu_);
  bool wake_ HVD_GUARDED_BY(mu_) = false;
  bool stop_ HVD_GUARDED_BY(mu_) = false;
  std::chrono::steady_clock::time_point last_publish_ HVD_GUARDED_BY(mu_);
  std::thread thread_;  // last: started once the rest is ready
};

}  // namespace hvd::launcherd
