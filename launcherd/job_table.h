// The launcher's jobs: ids, submit order, lookup, forgetting old finished jobs, and writing every
// change through to the JobStore (job_store.h) so a restarted launcher reloads them
// (job_recovery.cc). Not thread-safe: JobManager guards it; JobSecrets has its own lock.
#pragma once

#include <chrono>
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

  // Writes the job's record and secret through to the store; a failure is logged at most every
  // few seconds (the job goes on; a restarted launcher would not know its latest state).
  void Persist(const Job& job);
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
