// The launcher's jobs: ids, submit order, lookup, forgetting old finished jobs, and writing their
// changes to the JobStore (job_store.h) so a restarted launcher reloads them (job_recovery.cc).
// Not thread-safe: JobManager guards it; JobSecrets has its own lock.
//
// Persistence is batched (issue 22): a job's record is O(np), and writing it on every rank event
// made a job cost O(np^2) (7.8 ms per event at 8,000 ranks). A change marks the job dirty; Flush
// writes every dirty job once, in one transaction. A change of what a restarted launcher must not
// get wrong (the job is new, its state, its attempt, whether ranks are live, or it finished)
// flushes at once; the rest (a rank's start or exit, a refined cause) waits for the next Flush: the
// sweeper's Tick, every lease/10. A launcher killed (SIGKILL) between the two reloads the job in
// its latest state with its ranks as of the last flush; rank events the agents resend, heartbeats
// and reconciliation (job_recovery.cc) bring them up to date, as for any restart.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/mutex.h"
#include "base/thread_annotations.h"
#include "launcherd/job.h"
#include "launcherd/job_store.h"

namespace hvd::launcherd {

using JobPtr = std::shared_ptr<Job>;

class JobTable {
 public:
  // `store` (may be null: nothing persisted) must outlive the table. Finished jobs beyond
  // `max_finished` are forgotten, oldest first.
  JobTable(JobStore* store, size_t max_finished) : store_(store), max_finished_(max_finished) {}
  // Writes what is still dirty.
  ~JobTable() { Flush(); }
  JobTable(const JobTable&) = delete;
  JobTable& operator=(const JobTable&) = delete;

  // A fresh random id that no job in the table has.
  std::string NewId() const;
  // Appends the job (submit order). REQUIRES: its id is new to the table.
  void Add(JobPtr job);
  // Null when no job has the id (never had, or pruned).
  JobPtr Find(const std::string& id) const;
  bool Has(const std::string& id) const { return by_id_.count(id) > 0; }
  // Every job, in submit order. Callers that may finish (and so prune) jobs while walking it
  // iterate over a copy.
  const std::vector<JobPtr>& jobs() const { return jobs_; }

  // Whether any job is PENDING (a scheduling pass has something to do). O(jobs), never O(ranks).
  bool AnyPending() const;

  // The job changed: marks it dirty, and flushes at once when its state, attempt, finished flag
  // or whether any rank is live changed since it was last written (or it never was). A job no
  // longer in the table (pruned) is not written back.
  void Persist(const Job& job);
  // Writes every dirty job's record and secret in one transaction. A failure is logged at most
  // every few seconds and the jobs stay dirty: the next Flush tries again, a change that would
  // flush at once waits a second first; the jobs go on.
  void Flush();
  // How many flushes wrote something, and how many rows in all (tests, /metrics).
  uint64_t flushes() const { return flushes_; }
  uint64_t rows_written() const { return rows_written_; }
  // Forgets the oldest finished jobs beyond max_finished, in the store too.
  void Prune();
  size_t max_finished() const { return max_finished_; }
  JobStore* store() const { return store_; }

 private:
  JobStore* const store_;
  const size_t max_finished_;
  std::vector<JobPtr> jobs_;  // submit order
  std::map<std::string, JobPtr> by_id_;
  std::chrono::steady_clock::time_point persist_error_logged_;
  std::chrono::steady_clock::time_point retry_after_;  // after a failed flush (job_table.cc)
  // What the store holds of each job it was written for: a change of any of it flushes at once.
  struct Written {
    JobState state = JobState::kUnspecified;
    int attempt = 0;
    bool finished = false;
    bool live = false;  // any rank STARTING or RUNNING: a restored job waits for its agents
  };
  std::map<std::string, Written> written_;
  std::map<std::string, JobPtr> dirty_;  // changed since the last flush
  uint64_t flushes_ = 0;
  uint64_t rows_written_ = 0;
};

// The secrets of the jobs that are not finished: the rendezvous endpoints' SecretResolver.
// Thread-safe, and apart from JobManager's lock so that rendezvous authentication never waits
// behind job bookkeeping.
class JobSecrets {
 public:
  void Add(const std::string& job_id, const std::string& secret) HVD_EXCLUDES(mu_);
  void Forget(const std::string& job_id) HVD_EXCLUDES(mu_);
  // A live job's secret -> "job/<id>/" (compared in constant time against every secret).
  bool Resolve(const std::string& secret, std::string* prefix) const HVD_EXCLUDES(mu_);

 private:
  mutable base::Mutex mu_;
  std::map<std::string, std::string> secrets_ HVD_GUARDED_BY(mu_);  // job id -> secret
};

}  // namespace hvd::launcherd
