#include "agent/state_dir.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "base/logging.h"
#include "control/token.h"

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

Status WriteFileAtomically(const std::string& path, const std::string& content) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << content;
    if (!out.flush()) return Unavailable("cannot write " + tmp + ": " + std::strerror(errno));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return Unavailable("cannot rename " + tmp + " to " + path + ": " + std::strerror(errno));
  }
  return Status::OK();
}

Status LoadOrCreateCgroupKey(const std::string& state_dir, std::string* key) {
  const std::string path = state_dir + "/cgroup_key";
  std::ifstream in(path);
  std::getline(in, *key);
  if (!key->empty()) return Status::OK();
  *key = control::RandomHex(6);
  return WriteFileAtomically(path, *key + "\n")
      .WithContext("--state-dir (pass a writable directory)");
}

void SaveAgentId(const std::string& state_dir, const std::string& id) {
  if (state_dir.empty() || id.empty()) return;
  Status s = WriteFileAtomically(state_dir + "/agent_id", id + "\n");
  if (!s.ok()) {
    HVD_LOG(WARNING) << s.message() << " (the agent id is not kept across restarts)";
  }
}

}  // namespace hvd::agent
