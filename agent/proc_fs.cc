#include "agent/proc_fs.h"

#include <dirent.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace hvd::agent {
namespace {

// The fields of /proc/<pid>/stat after "(comm)", which may itself hold spaces and ')'.
std::string StatTail(int pid) {
  const std::string stat = ReadSmallFile("/proc/" + std::to_string(pid) + "/stat");
  const size_t close = stat.rfind(')');
  return close == std::string::npos || close + 2 > stat.size() ? "" : stat.substr(close + 2);
}

// Fields 3-5 of /proc/<pid>/stat: state, parent, process group. False when unreadable.
bool StatFields(pid_t pid, char* state, int* ppid, int* pgid) {
  return std::sscanf(StatTail(pid).c_str(), "%c %d %d", state, ppid, pgid) == 3;
}

// Calls fn(pid, state, ppid, pgid) for each process in /proc.
template <typename Fn>
void ForEachProcess(Fn fn) {
  DIR* d = opendir("/proc");
  if (d == nullptr) return;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    const pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
    char state = 0;
    int ppid = 0;
    int pgid = 0;
    if (StatFields(pid, &state, &ppid, &pgid)) fn(pid, state, ppid, pgid);
  }
  closedir(d);
}

}  // namespace

std::string ReadSmallFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

uint64_t ProcessStartTime(int pid) {
  if (pid <= 0) return 0;
  // Field 3 (state) ... field 22 (starttime).
  std::istringstream in(StatTail(pid));
  std::string field;
  for (int i = 3; i <= 22 && in >> field; ++i) {
    if (i == 3 && field == "Z") return 0;
    if (i == 22) return std::strtoull(field.c_str(), nullptr, 10);
  }
  return 0;
}

bool IsLiveProcess(int pid) {
  return ProcessStartTime(pid) != 0;
}

std::vector<pid_t> ChildrenOf(pid_t parent) {
  std::vector<pid_t> out;
  ForEachProcess([&](pid_t pid, char, pid_t ppid, pid_t) {
    if (ppid == parent) out.push_back(pid);
  });
  return out;
}

std::vector<GroupMember> GroupMembers(pid_t pgid) {
  std::vector<GroupMember> out;
  ForEachProcess([&](pid_t pid, char state, pid_t ppid, pid_t group) {
    if (group == pgid && state != 'Z') out.push_back({pid, ppid});
  });
  return out;
}

pid_t ProcessGroupOf(pid_t pid) {
  char state = 0;
  int ppid = 0;
  int pgid = 0;
  if (pid <= 0 || !StatFields(pid, &state, &ppid, &pgid) || state == 'Z') return -1;
  return pgid;
}

bool CatchesSignal(pid_t pid, int signal) {
  if (signal < 1 || signal > 64) return false;
  std::istringstream in(ReadSmallFile("/proc/" + std::to_string(pid) + "/status"));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("SigCgt:", 0) != 0) continue;
    const uint64_t mask = std::strtoull(line.c_str() + 7, nullptr, 16);  // bit n-1: signal n
    return (mask >> (signal - 1)) & 1;
  }
  return false;
}

}  // namespace hvd::agent
