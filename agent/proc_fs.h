// Small readers of /proc shared by the agent's process bookkeeping (cgroups, worker records, the
// worker wrapper). Each answers "as of now": a process may exit right after.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace hvd::agent {

// The whole content of a (small) file; "" when it cannot be read.
std::string ReadSmallFile(const std::string& path);

// The start time of `pid` (field 22 of /proc/<pid>/stat, clock ticks since boot), or 0 when it
// does not exist or is a zombie. With the pid, it names one process across pid reuse.
uint64_t ProcessStartTime(int pid);

// Whether `pid` exists and is not a zombie.
bool IsLiveProcess(int pid);

// The processes whose parent is `parent` (re-parented orphans included).
std::vector<pid_t> ChildrenOf(pid_t parent);

// The live processes of process group `pgid`, each with its parent.
struct GroupMember {
  pid_t pid = 0;
  pid_t ppid = 0;
};
std::vector<GroupMember> GroupMembers(pid_t pgid);

// The process group of `pid`, or -1 when it does not exist or is a zombie.
pid_t ProcessGroupOf(pid_t pid);

// Whether `pid` has a handler for `signal` (its SigCgt mask in /proc/<pid>/status): false when
// the signal would take its default action or be ignored, or the process is gone.
bool CatchesSignal(pid_t pid, int signal);

}  // namespace hvd::agent
