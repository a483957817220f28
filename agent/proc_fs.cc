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
  DIR* d = opendir("/proc");
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    const pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
    char state = 0;
    int ppid = 0;
    if (std::sscanf(StatTail(pid).c_str(), "%c %d", &state, &ppid) == 2 && ppid == parent) {
      out.push_back(pid);
    }
  }
  closedir(d);
  return out;
}

}  // namespace hvd::agent
