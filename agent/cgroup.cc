#include "agent/cgroup.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <sstream>
#include <thread>

#include "agent/proc_fs.h"
#include "base/logging.h"

namespace hvd::agent {
namespace {

using Clock = std::chrono::steady_clock;

constexpr auto kKillWait = std::chrono::seconds(2);
constexpr auto kKillPoll = std::chrono::milliseconds(5);

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

// Writes `text` to a cgroup control file; cgroupfs reports errors at write().
Status WriteControl(const std::string& path, const std::string& text) {
  const int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return Unavailable("open " + path + ": " + std::strerror(errno));
  const ssize_t n = write(fd, text.data(), text.size());
  const int err = errno;
  close(fd);
  if (n != static_cast<ssize_t>(text.size())) {
    return Unavailable("write '" + text + "' to " + path + ": " + std::strerror(err));
  }
  return Status::OK();
}

std::vector<std::string> SubDirs(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    if (e->d_type != DT_DIR || e->d_name[0] == '.') continue;
    out.push_back(dir + "/" + e->d_name);
  }
  closedir(d);
  return out;
}

// Live (non-zombie) processes in `dir` and below.
std::vector<int> LiveProcesses(const std::string& dir) {
  std::vector<int> pids;
  std::istringstream in(ReadSmallFile(CgroupTree::ProcsFile(dir)));
  for (int pid; in >> pid;) {
    if (IsLiveProcess(pid)) pids.push_back(pid);
  }
  for (const std::string& sub : SubDirs(dir)) {
    std::vector<int> more = LiveProcesses(sub);
    pids.insert(pids.end(), more.begin(), more.end());
  }
  return pids;
}

void RemoveTree(const std::string& dir) {
  for (const std::string& sub : SubDirs(dir)) RemoveTree(sub);
  if (rmdir(dir.c_str()) != 0 && errno != ENOENT) {
    HVD_LOG(WARNING) << "cannot remove cgroup " << dir << ": " << std::strerror(errno);
  }
}

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string item;
  std::istringstream in(s);
  while (std::getline(in, item, sep)) out.push_back(item);
  return out;
}

const char* ControllerOf(CgroupKind kind) {
  return kind == CgroupKind::kV1Freezer ? "freezer" : kind == CgroupKind::kV1Pids ? "pids" : "";
}

}  // namespace

void KillCgroupNow(const std::string& dir) {
  if (WriteControl(dir + "/cgroup.kill", "1").ok()) return;
  std::istringstream in(ReadSmallFile(CgroupTree::ProcsFile(dir)));
  for (int pid; in >> pid;) kill(pid, SIGKILL);
}

const char* CgroupKindName(CgroupKind kind) {
  switch (kind) {
    case CgroupKind::kV2:
      return "v2";
    case CgroupKind::kV1Freezer:
      return "v1 freezer";
    case CgroupKind::kV1Pids:
      return "v1 pids";
  }
  return "?";
}

std::string CgroupMountPoint(const std::string& mountinfo, CgroupKind kind) {
  std::istringstream in(mountinfo);
  for (std::string line; std::getline(in, line);) {
    // "36 35 0:30 / /sys/fs/cgroup/unified rw,nosuid shared:9 - cgroup2 cgroup2 rw"
    const size_t dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    const std::vector<std::string> head = Split(line.substr(0, dash), ' ');
    const std::vector<std::string> tail = Split(line.substr(dash + 3), ' ');
    if (head.size() < 5 || tail.size() < 3) continue;
    if (kind == CgroupKind::kV2) {
      if (tail[0] == "cgroup2") return head[4];
      continue;
    }
    if (tail[0] != "cgroup") continue;
    for (const std::string& opt : Split(tail[2], ',')) {
      if (opt == ControllerOf(kind)) return head[4];
    }
  }
  return "";
}

std::string OwnCgroupPath(const std::string& self_cgroup, CgroupKind kind) {
  std::istringstream in(self_cgroup);
  for (std::string line; std::getline(in, line);) {
    // "hierarchy-id:controllers:path"; the path may itself contain ':'.
    const size_t a = line.find(':');
    const size_t b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string id = line.substr(0, a);
    const std::string controllers = line.substr(a + 1, b - a - 1);
    const std::string path = line.substr(b + 1);
    if (kind == CgroupKind::kV2) {
      if (id == "0" && controllers.empty()) return path;
      continue;
    }
    for (const std::string& c : Split(controllers, ',')) {
      if (c == ControllerOf(kind)) return path;
    }
  }
  return "";
}

Status CgroupTree::OpenAt(CgroupKind kind, const std::string& parent, const std::string& key,
                          std::unique_ptr<CgroupTree>* out) {
  if (key.empty() || key.find('/') != std::string::npos) {
    return InvalidArgument("cgroup key '" + key + "' must be non-empty without '/'");
  }
  if (!Exists(ProcsFile(parent))) {
    return Unavailable(parent + " is not a cgroup directory (no cgroup.procs)");
  }
  const std::string base = parent + "/hvd-agent." + key;
  if (mkdir(base.c_str(), 0755) != 0 && errno != EEXIST) {
    return Unavailable("mkdir " + base + ": " + std::strerror(errno));
  }
  // Only non-root v2 cgroups have these files, so look in the new directory, not its parent.
  if (kind == CgroupKind::kV2 && !Exists(base + "/cgroup.kill") &&
      !Exists(base + "/cgroup.freeze")) {
    rmdir(base.c_str());
    return Unavailable(base + " has neither cgroup.kill nor cgroup.freeze (kernel before 5.2)");
  }
  out->reset(new CgroupTree(kind, base));
  return Status::OK();
}

Status CgroupTree::Open(const std::string& key, std::unique_ptr<CgroupTree>* out) {
  const std::string mountinfo = ReadSmallFile("/proc/self/mountinfo");
  const std::string self = ReadSmallFile("/proc/self/cgroup");
  std::string tried;
  for (CgroupKind kind : {CgroupKind::kV2, CgroupKind::kV1Freezer, CgroupKind::kV1Pids}) {
    const std::string mount = CgroupMountPoint(mountinfo, kind);
    const std::string own = OwnCgroupPath(self, kind);
    std::string why;
    if (mount.empty()) {
      why = "not mounted";
    } else if (own.empty()) {
      why = "this process is in no cgroup of it";
    } else {
      Status s = OpenAt(kind, mount + (own == "/" ? "" : own), key, out);
      if (s.ok()) return s;
      why = s.message();
    }
    tried += std::string(tried.empty() ? "" : "; ") + CgroupKindName(kind) + ": " + why;
  }
  return Unavailable("no cgroup hierarchy this agent can write to (" + tried + ")");
}

std::string CgroupTree::ProcsFile(const std::string& dir) {
  return dir + "/cgroup.procs";
}

Status CgroupTree::CreateRankDir(const std::string& job, int attempt, int rank,
                                 std::string* dir) const {
  const std::string job_dir = base_ + "/job-" + job + "." + std::to_string(attempt);
  *dir = job_dir + "/rank-" + std::to_string(rank);
  // A wrapper whose worker ended removes the job's directory once it is empty, so another rank of
  // the job may see it vanish between two mkdirs: start over a few times.
  Status s;
  for (int attempt_no = 0; attempt_no < 3; ++attempt_no) {
    s = Status::OK();
    for (const std::string& d : {base_, job_dir, *dir}) {
      if (mkdir(d.c_str(), 0755) != 0 && errno != EEXIST) {
        s = Unavailable("mkdir " + d + ": " + std::strerror(errno));
        break;
      }
    }
    if (s.ok()) return s;
  }
  return s;
}

Status CgroupTree::KillProcesses(const std::string& dir) const {
  if (kind_ == CgroupKind::kV2 && Exists(dir + "/cgroup.kill")) {
    return WriteControl(dir + "/cgroup.kill", "1");
  }
  // Freeze first where the hierarchy can, so nothing forks between reading the list and killing
  // it; a frozen process still dies of SIGKILL.
  const char* freeze_name = nullptr;
  const char* frozen = nullptr;
  const char* thawed = nullptr;
  if (kind_ == CgroupKind::kV2) {
    freeze_name = "/cgroup.freeze";
    frozen = "1";
    thawed = "0";
  } else if (kind_ == CgroupKind::kV1Freezer) {
    freeze_name = "/freezer.state";
    frozen = "FROZEN";
    thawed = "THAWED";
  }
  const std::string freeze_file = freeze_name != nullptr ? dir + freeze_name : std::string();
  if (!freeze_file.empty()) HVD_RETURN_IF_ERROR(WriteControl(freeze_file, frozen));
  // Frozen: the list cannot grow while it is read.
  for (int pid : LiveProcesses(dir)) kill(pid, SIGKILL);
  if (!freeze_file.empty()) return WriteControl(freeze_file, thawed);
  return Status::OK();
}

Status CgroupTree::KillAndRemove(const std::string& dir) const {
  if (!Exists(dir)) return Status::OK();
  const auto deadline = Clock::now() + kKillWait;
  std::vector<int> left;
  // The pids hierarchy cannot freeze: a process forking as fast as it is killed needs rounds.
  do {
    HVD_RETURN_IF_ERROR(KillProcesses(dir));
    left = LiveProcesses(dir);
    if (left.empty()) break;
    std::this_thread::sleep_for(kKillPoll);
    left = LiveProcesses(dir);
  } while (!left.empty() && Clock::now() < deadline);
  if (!left.empty()) {
    return Unavailable("cgroup " + dir + " still holds " + std::to_string(left.size()) +
                       " process(es) (pid " + std::to_string(left[0]) + ") after SIGKILL");
  }
  RemoveTree(dir);
  return Status::OK();
}

void CgroupTree::RemoveRankDir(const std::string& rank_dir) const {
  if (rmdir(rank_dir.c_str()) == 0) rmdir(rank_dir.substr(0, rank_dir.rfind('/')).c_str());
}

std::vector<std::string> CgroupTree::JobDirs() const {
  std::vector<std::string> out;
  for (const std::string& d : SubDirs(base_)) {
    if (d.rfind(base_ + "/job-", 0) == 0) out.push_back(d);
  }
  return out;
}

void CgroupTree::RemoveAll() const {
  for (const std::string& d : JobDirs()) {
    Status s = KillAndRemove(d);
    if (!s.ok()) {
      HVD_LOG(WARNING) << s.message();
    }
  }
  RemoveTree(base_);
}

int CgroupTree::RemoveDeadAgents() const {
  const std::string parent = base_.substr(0, base_.rfind('/'));
  const std::string prefix = parent + "/hvd-agent.pid";
  int removed = 0;
  for (const std::string& dir : SubDirs(parent)) {
    if (dir == base_ || dir.rfind(prefix, 0) != 0) continue;
    const std::string digits = dir.substr(prefix.size());
    if (digits.empty() || digits.size() > 9 ||
        digits.find_first_not_of("0123456789") != std::string::npos) {
      continue;
    }
    // Alive, or a pid reused by a process we may not signal: not ours to judge.
    const int pid = std::stoi(digits);
    if (pid <= 0 || kill(pid, 0) == 0 || errno != ESRCH) continue;
    // Its wrappers end their workers when it dies (PR_SET_PDEATHSIG), so the directories are
    // normally empty. Processes there may be an agent's in another pid namespace that shares
    // this cgroup: said, not killed.
    const std::vector<int> left = LiveProcesses(dir);
    if (!left.empty()) {
      HVD_LOG(WARNING) << dir << " holds " << left.size() << " process(es) (pid " << left[0]
                       << ") and no agent pid " << pid << " runs here: left as it is";
      continue;
    }
    // Removed, never killed: rmdir fails (EBUSY) for a directory a process joined since.
    RemoveTree(dir);
    if (Exists(dir)) continue;
    HVD_LOG(INFO) << "removed " << dir << ", the empty cgroup of agent pid " << pid
                  << ", which ended without removing it";
    ++removed;
  }
  return removed;
}

}  // namespace hvd::agent
