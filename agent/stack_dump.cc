#include "agent/stack_dump.h"

#include <signal.h>

#include <set>

#include "agent/proc_fs.h"

namespace hvd::agent {

std::vector<pid_t> StackDumpTargets(pid_t leader, int signal) {
  std::vector<pid_t> out;
  if (leader <= 0) return out;
  std::set<pid_t> catching;
  const std::vector<GroupMember> members = GroupMembers(leader);
  for (const GroupMember& m : members) {
    if (CatchesSignal(m.pid, signal)) catching.insert(m.pid);
  }
  for (const GroupMember& m : members) {
    if (catching.count(m.pid) && !catching.count(m.ppid)) out.push_back(m.pid);
  }
  return out;
}

std::vector<pid_t> SendStackDump(pid_t leader, int signal) {
  std::vector<pid_t> sent;
  for (pid_t pid : StackDumpTargets(leader, signal)) {
    // Checked again just before: a handler removed since the scan must not mean an ended rank.
    if (CatchesSignal(pid, signal) && kill(pid, signal) == 0) sent.push_back(pid);
  }
  return sent;
}

}  // namespace hvd::agent
