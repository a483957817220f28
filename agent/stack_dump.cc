#include "agent/stack_dump.h"

#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <map>
#include <set>

#include "agent/proc_fs.h"

namespace hvd::agent {
namespace {

int PidfdOpen(pid_t pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
#else
  errno = ENOSYS;
  return -1;
#endif
}

bool PidfdSignal(int pidfd, int signal) {
#ifdef SYS_pidfd_send_signal
  return syscall(SYS_pidfd_send_signal, pidfd, signal, nullptr, 0) == 0;
#else
  errno = ENOSYS;
  return false;
#endif
}

// `signal` to `pid` if it is still a member of `leader`'s group that catches it. The process is
// pinned by a pidfd before the check (kernels from 5.3), so a pid reused since the scan by a
// process outside the group, or a handler removed since, never gets it; without pidfds the check
// and kill() are microseconds apart.
bool SendTo(pid_t pid, pid_t leader, int signal) {
  const int pidfd = PidfdOpen(pid);
  const bool still = ProcessGroupOf(pid) == leader && CatchesSignal(pid, signal);
  bool sent = false;
  if (pidfd >= 0) {
    sent = still && PidfdSignal(pidfd, signal);
    close(pidfd);
  } else {
    sent = still && kill(pid, signal) == 0;
  }
  return sent;
}

}  // namespace

std::vector<pid_t> StackDumpTargets(pid_t leader, int signal) {
  std::vector<pid_t> out;
  if (leader <= 0) return out;
  std::map<pid_t, pid_t> parent;  // the group's members
  std::set<pid_t> catching;
  for (const GroupMember& m : GroupMembers(leader)) {
    parent[m.pid] = m.ppid;
    if (CatchesSignal(m.pid, signal)) catching.insert(m.pid);
  }
  // A catcher with a catching ancestor in the group inherited the handler from it (fork): only
  // the topmost are asked. The walk ends where the chain leaves the group (bounded by its size).
  for (pid_t pid : catching) {
    bool below_another = false;
    pid_t up = parent[pid];
    for (size_t steps = 0; steps < parent.size() && parent.count(up); ++steps, up = parent[up]) {
      if (catching.count(up)) {
        below_another = true;
        break;
      }
    }
    if (!below_another) out.push_back(pid);
  }
  return out;
}

std::vector<pid_t> SendStackDump(pid_t leader, int signal) {
  std::vector<pid_t> sent;
  for (pid_t pid : StackDumpTargets(leader, signal)) {
    if (SendTo(pid, leader, signal)) sent.push_back(pid);
  }
  return sent;
}

}  // namespace hvd::agent
