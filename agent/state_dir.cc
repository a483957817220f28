#include "agent/state_dir.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "common/logging.h"

namespace hvd::agent {

Status LoadAgentId(const std::string& state_dir, std::string* id) {
  if (state_dir.empty()) return Status::OK();
  if (mkdir(state_dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return InvalidArgument("state dir " + state_dir + ": " + std::strerror(errno) +
                           " (create it, or pass a writable --state-dir)");
  }
  std::ifstream in(state_dir + "/agent_id");
  std::getline(in, *id);
  return Status::OK();
}

void SaveAgentId(const std::string& state_dir, const std::string& id) {
  if (state_dir.empty() || id.empty()) return;
  const std::string path = state_dir + "/agent_id";
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << id << "\n";
    if (!out.flush()) {
      HVD_LOG(WARNING) << "cannot write " << tmp << ": " << std::strerror(errno)
                       << " (the agent id is not kept across restarts)";
      return;
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    HVD_LOG(WARNING) << "cannot rename " << tmp << " to " << path << ": " << std::strerror(errno);
  }
}

}  // namespace hvd::agent
