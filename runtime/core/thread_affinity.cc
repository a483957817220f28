#include "core/thread_affinity.h"

#include <pthread.h>
#include <sched.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <vector>

#include "base/logging.h"

namespace hvd::runtime::core {
namespace {

bool ParseInt(const std::string& text, int* out) {
  size_t b = text.find_first_not_of(" \t");
  size_t e = text.find_last_not_of(" \t");
  if (b == std::string::npos) return false;
  const std::string t = text.substr(b, e - b + 1);
  if (t.empty() || t.size() > 6) return false;
  int v = 0;
  for (char c : t) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  *out = v;
  return true;
}

}  // namespace

Status ParseThreadAffinity(const std::string& variable, const std::string& value, int local_rank,
                           int local_size, int* cpu) {
  *cpu = -1;
  if (value.empty()) return Status::OK();
  std::vector<int> cpus;
  std::stringstream ss(value);
  std::string entry;
  while (std::getline(ss, entry, ',')) {
    int c;
    if (!ParseInt(entry, &c) || c >= CPU_SETSIZE) {
      return InvalidArgument(variable + "=" + value + ": entry " + std::to_string(cpus.size()) +
                             " ('" + entry +
                             "') is not a CPU number; give one CPU per local "
                             "rank, comma-separated (\"0,1,2,3\")");
    }
    cpus.push_back(c);
  }
  if (static_cast<int>(cpus.size()) < local_size || local_rank < 0 ||
      local_rank >= static_cast<int>(cpus.size())) {
    return InvalidArgument(variable + "=" + value + " gives " + std::to_string(cpus.size()) +
                           " CPU(s) but this host runs " + std::to_string(local_size) +
                           " ranks; give one CPU per local rank");
  }
  *cpu = cpus[local_rank];
  return Status::OK();
}

int PinBackgroundThread(const std::function<const char*(const char*)>& getenv) {
  std::string variable = "HVD_THREAD_AFFINITY";
  const char* value = getenv(variable.c_str());
  if (value == nullptr || value[0] == '\0') {
    variable = "HOROVOD_THREAD_AFFINITY";
    value = getenv(variable.c_str());
  }
  if (value == nullptr || value[0] == '\0') return -1;
  const char* rank = getenv("HVD_LOCAL_RANK");
  const char* size = getenv("HVD_LOCAL_SIZE");
  const int local_rank = rank != nullptr ? std::atoi(rank) : 0;
  const int local_size = size != nullptr ? std::atoi(size) : 1;
  int cpu = -1;
  Status s = ParseThreadAffinity(variable, value, local_rank, local_size, &cpu);
  if (!s.ok()) {
    HVD_LOG(WARNING) << s.message() << "; the background thread is not pinned";
    return -1;
  }
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  const int err = pthread_setaffinity_np(pthread_self(), sizeof set, &set);
  if (err != 0) {
    HVD_LOG(WARNING) << variable << ": cannot pin the background thread of local rank "
                     << local_rank << " to CPU " << cpu << ": " << std::strerror(err)
                     << " (is the CPU outside the rank's allowed set, e.g. its --bind-to?)";
    return -1;
  }
  HVD_LOG(INFO) << "background thread of local rank " << local_rank << " pinned to CPU " << cpu;
  return cpu;
}

}  // namespace hvd::runtime::core
