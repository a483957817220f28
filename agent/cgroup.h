// Job cgroups: every rank runs in a cgroup of its own, below one per job, below one per agent, so
// that ending a job reaches every process it made, also those that left their process group
// (setsid, a daemonizing data loader) and so escaped kill(-pgid) and PR_SET_PDEATHSIG.
//
// Vocabulary:
//   hierarchy - a mounted cgroup tree the agent can write to: v2 (the unified tree; killed with
//               cgroup.kill, or by freezing and killing where that file is missing), else v1's
//               freezer controller (freeze, kill, thaw), else v1's pids controller (kill until
//               empty). The first one that works wins; none is also fine (a warning, then process
//               groups and the worker wrapper's subreaper do the job alone).
//   base      - the agent's directory in that hierarchy: its own cgroup (so systemd's Delegate=
//               and a pod's cgroup keep containing everything) plus "hvd-agent.<key>". The key is
//               stable across agent restarts when the agent has a --state-dir, so a restarted agent
//               finds and kills what its previous run left.
//   job dir   - base/job-<id>.<attempt>; rank dirs inside it: rank-<n>.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "hvd/status.h"

namespace hvd::agent {

enum class CgroupKind { kV2, kV1Freezer, kV1Pids };

// "v2", "v1 freezer", "v1 pids".
const char* CgroupKindName(CgroupKind kind);

class CgroupTree {
 public:
  // Finds a writable hierarchy (from /proc/self/mountinfo and /proc/self/cgroup) and creates
  // the agent's base directory "hvd-agent.<key>" in its own cgroup there. Unavailable, saying
  // what was tried and why each failed, when no hierarchy can be used.
  // REQUIRES: key is non-empty and has no '/'.
  static Status Open(const std::string& key, std::unique_ptr<CgroupTree>* out);
  // The same in a given directory of a hierarchy of the given kind.
  static Status OpenAt(CgroupKind kind, const std::string& parent, const std::string& key,
                       std::unique_ptr<CgroupTree>* out);

  CgroupTree(const CgroupTree&) = delete;
  CgroupTree& operator=(const CgroupTree&) = delete;

  CgroupKind kind() const { return kind_; }
  const std::string& base() const { return base_; }

  // Creates base/job-<job>.<attempt>/rank-<rank> (and the job dir) and returns the rank dir.
  Status CreateRankDir(const std::string& job, int attempt, int rank, std::string* dir) const;
  // The file a process writes "0" to in order to join `dir` (cgroup.procs).
  static std::string ProcsFile(const std::string& dir);
  // Kills every process in `dir` and its subdirectories with SIGKILL and waits (up to 2 s) until
  // they are gone; then removes the directories. OK when `dir` does not exist.
  Status KillAndRemove(const std::string& dir) const;
  // Removes a rank dir that never held a process, and its job dir when that is empty too.
  void RemoveRankDir(const std::string& rank_dir) const;
  // The job dirs below base (leftovers of a previous run when called at start).
  std::vector<std::string> JobDirs() const;
  // Kills and removes every job dir, then the base itself (the agent stops).
  void RemoveAll() const;
  // Removes every "hvd-agent.pid<N>" beside base (an agent without --state-dir) whose process N
  // is gone and which holds no process: an agent killed outright (SIGKILL, the OOM killer)
  // removed nothing. Returns the directories removed.
  int RemoveDeadAgents() const;

 private:
  CgroupTree(CgroupKind kind, std::string base) : kind_(kind), base_(std::move(base)) {}
  Status KillProcesses(const std::string& dir) const;

  const CgroupKind kind_;
  const std::string base_;
};

// SIGKILL to every process in the cgroup `dir` now: cgroup.kill where the kernel has it, else one
// pass over cgroup.procs. Neither waits nor removes anything; for the wrapper and the rank runner,
// which hold a rank's directory but no CgroupTree. Async-signal-safe it is not; it allocates.
void KillCgroupNow(const std::string& dir);

// Pure parsing, for tests: the mount point of the cgroup2 tree (fstype "cgroup2"), or of the v1
// hierarchy carrying `controller`, from /proc/self/mountinfo text; "" when absent.
std::string CgroupMountPoint(const std::string& mountinfo, CgroupKind kind);
// This process's path in that hierarchy from /proc/self/cgroup text ("0::/a/b" for v2,
// "N:freezer:/a" for v1); "" when absent.
std::string OwnCgroupPath(const std::string& self_cgroup, CgroupKind kind);

}  // namespace hvd::agent
