// The launcher's job table on disk: every job's record (hvd.v1.JobStatus: spec, state, cause, exit
// code, ranks, attempt) and secret, in SQLite at <state-dir>/jobs.db, so a launcher that restarts,
// even after SIGKILL, reloads every job and reconciles it with what its agents still run.
//
// Durability: WAL journal with synchronous=NORMAL. A committed change survives the launcher
// process being killed at any point (the WAL is in the page cache, and SQLite recovers it); after
// a power loss the last few changes may be lost, never the database. Writes are batched by the
// job table (job_table.h): one transaction per flush, one row per job that changed, never per
// rank event or output line.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "hvd/status.h"
#include "launcherd/job_types.h"

namespace hvd::launcherd {

struct StoredJob {
  JobStatus status;
  std::string secret;
  int64_t next_seq = 0;  // the job's output log end when written
};

class JobStore {
 public:
  // Opens (creating) <dir>/jobs.db. The database and its -wal and -shm are 0600 whatever the
  // umask (they hold job secrets); a `dir` other users can read is warned about, once. Errors
  // name the file and SQLite's message.
  static Status Open(const std::string& dir, std::unique_ptr<JobStore>* out);
  virtual ~JobStore() = default;

  // Inserts or replaces the job's row.
  virtual Status Put(const StoredJob& job) = 0;
  // Inserts or replaces every job's row in one transaction: all of them are written, or none.
  virtual Status PutMany(const std::vector<StoredJob>& jobs) = 0;
  virtual Status Remove(const std::string& id) = 0;
  // Every job, in submit order.
  virtual Status LoadAll(std::vector<StoredJob>* out) = 0;
};

}  // namespace hvd::launcherd
