#include "agent/pid_records.h"

#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>

#include "agent/proc_fs.h"
#include "agent/state_dir.h"
#include "base/logging.h"

namespace hvd::agent {
std::string FormatRecord(const WorkerRecord& r) {
  std::ostringstream out;
  out << "job " << r.job << "\nattempt " << r.attempt << "\nrank " << r.rank << "\nwrapper "
      << r.wrapper_pid << " " << r.wrapper_start << "\nworker " << r.worker_pid << " "
      << r.worker_start << "\ncgroup " << r.cgroup_dir << "\n";
  return out.str();
}

bool ParseRecord(const std::string& text, WorkerRecord* r) {
  std::istringstream in(text);
  int fields = 0;
  for (std::string line; std::getline(in, line);) {
    std::istringstream f(line);
    std::string name;
    f >> name;
    if (name == "job") {
      fields += static_cast<bool>(f >> r->job);
    } else if (name == "attempt") {
      fields += static_cast<bool>(f >> r->attempt);
    } else if (name == "rank") {
      fields += static_cast<bool>(f >> r->rank);
    } else if (name == "wrapper") {
      fields += static_cast<bool>(f >> r->wrapper_pid >> r->wrapper_start);
    } else if (name == "worker") {
      fields += static_cast<bool>(f >> r->worker_pid >> r->worker_start);
    } else if (name == "cgroup") {
      std::getline(f >> std::ws, r->cgroup_dir);
      ++fields;
    }
  }
  return fields == 6 && !r->job.empty() && r->worker_pid > 0;
}

Status PidRecords::Init() const {
  if (dir_.empty()) return Status::OK();
  if (mkdir(dir_.c_str(), 0700) != 0 && errno != EEXIST) {
    return InvalidArgument("cannot create " + dir_ + ": " + std::strerror(errno) +
                           " (pass a writable --state-dir)");
  }
  return Status::OK();
}

std::string PidRecords::Path(const std::string& job, int attempt, int rank) const {
  return dir_ + "/" + job + "." + std::to_string(attempt) + "." + std::to_string(rank);
}

void PidRecords::Write(const WorkerRecord& r) const {
  if (dir_.empty()) return;
  Status s = WriteFileAtomically(Path(r.job, r.attempt, r.rank), FormatRecord(r));
  if (!s.ok()) {
    HVD_LOG(WARNING) << s.message() << "; a restarted agent will not know of pid " << r.worker_pid;
  }
}

void PidRecords::Remove(const std::string& job, int attempt, int rank) const {
  if (dir_.empty()) return;
  const std::string path = Path(job, attempt, rank);
  if (unlink(path.c_str()) != 0 && errno != ENOENT) {
    HVD_LOG(WARNING) << "cannot remove " << path << ": " << std::strerror(errno);
  }
}

std::vector<WorkerRecord> PidRecords::ReadAll() const {
  std::vector<WorkerRecord> out;
  if (dir_.empty()) return out;
  DIR* d = opendir(dir_.c_str());
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name[0] == '.' || (name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0)) {
      continue;
    }
    WorkerRecord r;
    if (ParseRecord(ReadSmallFile(dir_ + "/" + name), &r)) {
      out.push_back(std::move(r));
    } else {
      HVD_LOG(WARNING) << "ignoring malformed worker record " << dir_ << "/" << name;
    }
  }
  closedir(d);
  return out;
}

int PidRecords::KillRecorded() const {
  int signalled = 0;
  for (const WorkerRecord& r : ReadAll()) {
    const uint64_t worker_now = ProcessStartTime(r.worker_pid);
    int here = 0;  // processes of this record's signalled
    // The group id is the worker's pid. While a group has members its id cannot be reused, so
    // if that pid is free the members are the worker's; if it belongs to a newer process, the
    // worker's group is empty and the id now names someone else's: leave it alone.
    if (worker_now == r.worker_start || worker_now == 0) {
      if (kill(-r.worker_pid, SIGKILL) == 0) ++here;
    }
    if (worker_now == r.worker_start && kill(r.worker_pid, SIGKILL) == 0) ++here;
    if (r.wrapper_pid > 0 && ProcessStartTime(r.wrapper_pid) == r.wrapper_start &&
        kill(r.wrapper_pid, SIGKILL) == 0) {
      ++here;
    }
    // Only what was still there is news: a record whose processes are all gone is just dropped.
    if (here > 0) {
      HVD_LOG(WARNING) << "reaped job " << r.job << " rank " << r.rank << " (worker pid "
                       << r.worker_pid << ") left running by a previous run of this agent";
    } else {
      HVD_LOG(INFO) << "job " << r.job << " rank " << r.rank << " (worker pid " << r.worker_pid
                    << ") of a previous run of this agent is gone; its record is dropped";
    }
    signalled += here;
    Remove(r.job, r.attempt, r.rank);
  }
  return signalled;
}

}  // namespace hvd::agent
