// The processes an agent runs, written down in its --state-dir (one small file per rank under
// workers/), so that an agent that was SIGKILLed, or crashed, and is started again kills whatever
// of its previous run is still alive before it registers. The wrappers' lifelines already end
// everything when the agent dies; these records cover what even that misses (the agent and a
// wrapper killed together, with cgroups unavailable).
//
// A recorded pid is trusted only with its start time (field 22 of /proc/<pid>/stat, in clock
// ticks since boot): after a restart, pids may have been reused.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "agent/proc_fs.h"
#include "hvd/status.h"

namespace hvd::agent {

struct WorkerRecord {
  std::string job;
  int attempt = 0;
  int rank = 0;
  int wrapper_pid = 0;
  uint64_t wrapper_start = 0;
  int worker_pid = 0;  // also the worker's process group id
  uint64_t worker_start = 0;
  std::string cgroup_dir;  // empty: none
};

class PidRecords {
 public:
  // `dir`: <state-dir>/workers; empty: records are neither written nor read.
  explicit PidRecords(std::string dir) : dir_(std::move(dir)) {}

  bool enabled() const { return !dir_.empty(); }
  // Creates the directory. InvalidArgument naming it when it cannot be created.
  Status Init() const;
  // Writes the record atomically (rename); failures are logged, not fatal.
  void Write(const WorkerRecord& r) const;
  void Remove(const std::string& job, int attempt, int rank) const;
  // Every readable record; malformed files are logged and skipped.
  std::vector<WorkerRecord> ReadAll() const;

  // Kills what the records name that still lives (the worker's group with the worker, the
  // wrapper; the cgroup is left to the caller) and removes the records. Returns how many
  // processes were signalled.
  int KillRecorded() const;

 private:
  std::string Path(const std::string& job, int attempt, int rank) const;
  const std::string dir_;
};

// Record files as text: "job <id>\nattempt <n>\n..." (pure, for tests).
std::string FormatRecord(const WorkerRecord& r);
bool ParseRecord(const std::string& text, WorkerRecord* r);

}  // namespace hvd::agent
