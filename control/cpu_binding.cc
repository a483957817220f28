#include "control/cpu_binding.h"

#include <dirent.h>
#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <utility>

namespace hvd::control {
namespace {

// A non-negative decimal integer, the whole of `text`.
bool ParseCpu(const std::string& text, int* out) {
  if (text.empty() || text.size() > 6) return false;
  int v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  *out = v;
  return true;
}

std::string Trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

bool ReadInt(const std::string& path, int* out) {
  std::ifstream in(path);
  long v;
  if (!(in >> v) || v < 0) return false;
  *out = static_cast<int>(v);
  return true;
}

}  // namespace

Status ParseBindTo(const std::string& text, BindTo* out) {
  if (text == "none" || text.empty()) {
    *out = BindTo::kNone;
  } else if (text == "core") {
    *out = BindTo::kCore;
  } else if (text == "socket") {
    *out = BindTo::kSocket;
  } else {
    return InvalidArgument("cannot bind to '" + text +
                           "': hvd binds ranks to a core, a socket or none (to give each rank its "
                           "own CPUs, use --cpu-list \"0-3;4-7\")");
  }
  return Status::OK();
}

const char* BindToName(BindTo b) {
  switch (b) {
    case BindTo::kCore:
      return "core";
    case BindTo::kSocket:
      return "socket";
    default:
      return "none";
  }
}

Status ParseCpuSet(const std::string& text, std::vector<int>* cpus) {
  cpus->clear();
  const std::string set = Trim(text);
  if (set.empty()) return InvalidArgument("an empty CPU set (expected e.g. \"0-3,8\")");
  std::stringstream ss(set);
  std::string part;
  while (std::getline(ss, part, ',')) {
    part = Trim(part);
    const size_t dash = part.find('-');
    int lo, hi;
    if (dash == std::string::npos) {
      if (!ParseCpu(part, &lo)) {
        return InvalidArgument("'" + part + "' in \"" + set +
                               "\" is not a CPU number (expected e.g. \"0-3,8\")");
      }
      hi = lo;
    } else if (!ParseCpu(Trim(part.substr(0, dash)), &lo) ||
               !ParseCpu(Trim(part.substr(dash + 1)), &hi) || hi < lo) {
      return InvalidArgument("'" + part + "' in \"" + set +
                             "\" is not a CPU range (expected FIRST-LAST, e.g. \"0-3\")");
    }
    for (int c = lo; c <= hi; ++c) cpus->push_back(c);
  }
  std::sort(cpus->begin(), cpus->end());
  cpus->erase(std::unique(cpus->begin(), cpus->end()), cpus->end());
  return Status::OK();
}

Status ParseCpuList(const std::string& text, std::vector<std::vector<int>>* lists) {
  lists->clear();
  std::stringstream ss(text);
  std::string entry;
  int index = 0;
  while (std::getline(ss, entry, ';')) {
    std::vector<int> cpus;
    Status s = ParseCpuSet(entry, &cpus);
    if (!s.ok()) {
      return InvalidArgument("--cpu-list entry " + std::to_string(index) + " (\"" + Trim(entry) +
                             "\", for local rank " + std::to_string(index) + "): " + s.message() +
                             "; give one CPU set per local rank, separated by ';'");
    }
    lists->push_back(std::move(cpus));
    ++index;
  }
  if (lists->empty()) {
    return InvalidArgument(
        "--cpu-list is empty; give one CPU set per local rank, e.g. \"0-3;4-7\"");
  }
  return Status::OK();
}

std::string FormatCpuSet(std::vector<int> cpus) {
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ",";
    out += std::to_string(cpus[i]);
    if (j > i) out += "-" + std::to_string(cpus[j]);
    i = j + 1;
  }
  return out;
}

Status PolicyFromValues(const std::string& bind_to, const std::string& cpu_list,
                        BindingPolicy* policy) {
  *policy = BindingPolicy();
  Status s = ParseBindTo(bind_to, &policy->bind_to);
  if (!s.ok()) return s.WithContext(kBindToEnv);
  if (!cpu_list.empty()) {
    if (policy->bind_to != BindTo::kNone) {
      return InvalidArgument(std::string("both --bind-to ") + BindToName(policy->bind_to) +
                             " and --cpu-list are set; give one (a CPU list already says where "
                             "each rank runs)");
    }
    HVD_RETURN_IF_ERROR(ParseCpuList(cpu_list, &policy->cpu_lists));
  }
  return Status::OK();
}

Status PlanBinding(const BindingPolicy& policy, const std::vector<CpuInfo>& topology,
                   const std::vector<int>& allowed_in, int local_rank, int local_size,
                   BindingPlan* plan) {
  *plan = BindingPlan();
  if (policy.none()) return Status::OK();
  if (local_rank < 0 || local_size < 1 || local_rank >= local_size) {
    return InvalidArgument("cannot bind local rank " + std::to_string(local_rank) + " of " +
                           std::to_string(local_size));
  }
  std::vector<int> allowed = allowed_in;
  if (allowed.empty()) {
    for (const CpuInfo& c : topology) allowed.push_back(c.cpu);
  }
  std::sort(allowed.begin(), allowed.end());
  const auto is_allowed = [&](int cpu) {
    return std::binary_search(allowed.begin(), allowed.end(), cpu);
  };

  if (!policy.cpu_lists.empty()) {
    const int n = static_cast<int>(policy.cpu_lists.size());
    if (local_rank >= n) {
      return FailedPrecondition(
          "--cpu-list has " + std::to_string(n) + " entr" + (n == 1 ? "y" : "ies") +
          " but this host runs " + std::to_string(local_size) + " ranks (local rank " +
          std::to_string(local_rank) + " has none); give one CPU set per local rank");
    }
    const std::vector<int>& mine = policy.cpu_lists[local_rank];
    for (int cpu : mine) {
      if (!is_allowed(cpu)) {
        return FailedPrecondition(
            "--cpu-list entry " + std::to_string(local_rank) + " (\"" + FormatCpuSet(mine) +
            "\") names CPU " + std::to_string(cpu) +
            ", which this host does not let the job use (allowed: " + FormatCpuSet(allowed) + ")");
      }
    }
    plan->cpus = mine;
    return Status::OK();
  }

  // The allowed CPUs grouped into cores, or sockets, ordered by their lowest CPU number.
  std::map<std::pair<int, int>, std::vector<int>> groups;  // (package, core or -1) -> CPUs
  std::map<int, const CpuInfo*> by_cpu;
  for (const CpuInfo& c : topology) by_cpu[c.cpu] = &c;
  for (int cpu : allowed) {
    auto it = by_cpu.find(cpu);
    const int package = it != by_cpu.end() ? it->second->package : 0;
    const int core = it != by_cpu.end() ? it->second->core : cpu;
    groups[{package, policy.bind_to == BindTo::kCore ? core : -1}].push_back(cpu);
  }
  std::vector<std::vector<int>> units;
  for (auto& [key, cpus] : groups) units.push_back(std::move(cpus));
  std::sort(units.begin(), units.end());  // each is sorted: by lowest CPU
  const int n = static_cast<int>(units.size());
  if (n == 0) return FailedPrecondition("this host allows the job no CPU to bind to");

  const char* what = policy.bind_to == BindTo::kCore ? "core" : "socket";
  if (policy.bind_to == BindTo::kSocket || local_size > n) {
    plan->cpus = units[local_rank % n];
    if (local_size > n && local_rank == 0) {
      plan->note = "--bind-to " + std::string(what) + ": " + std::to_string(local_size) +
                   " ranks on this host share " + std::to_string(n) + " " + what +
                   (n == 1 ? "" : "s") + " (CPUs " + FormatCpuSet(allowed) +
                   "); ranks are bound round-robin, more than one per " + what;
    }
  } else {
    const int block = n / local_size;
    for (int i = local_rank * block; i < (local_rank + 1) * block; ++i) {
      plan->cpus.insert(plan->cpus.end(), units[i].begin(), units[i].end());
    }
  }
  std::sort(plan->cpus.begin(), plan->cpus.end());
  return Status::OK();
}

Status ReadCpuTopology(const std::string& root, std::vector<CpuInfo>* cpus) {
  cpus->clear();
  DIR* d = opendir(root.c_str());
  if (d == nullptr) {
    return Unavailable("cannot list " + root + ": " + std::strerror(errno));
  }
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    CpuInfo c;
    if (name.rfind("cpu", 0) != 0 || !ParseCpu(name.substr(3), &c.cpu)) continue;
    const std::string topo = root + "/" + name + "/topology/";
    if (!ReadInt(topo + "core_id", &c.core)) c.core = c.cpu;
    if (!ReadInt(topo + "physical_package_id", &c.package)) c.package = 0;
    cpus->push_back(c);
  }
  closedir(d);
  std::sort(cpus->begin(), cpus->end(),
            [](const CpuInfo& a, const CpuInfo& b) { return a.cpu < b.cpu; });
  return Status::OK();
}

Status AllowedCpus(std::vector<int>* cpus) {
  cpus->clear();
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) {
    return Unavailable(std::string("sched_getaffinity: ") + std::strerror(errno));
  }
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) cpus->push_back(c);
  }
  return Status::OK();
}

Status ParseBindingArgs(const std::string& args, std::string* bind_to) {
  bind_to->clear();
  std::vector<std::string> words;
  std::stringstream ss(args);
  for (std::string w; ss >> w;) words.push_back(w);
  for (size_t i = 0; i < words.size(); ++i) {
    std::string opt = words[i];
    std::string value;
    const size_t eq = opt.find('=');
    const bool has_eq = eq != std::string::npos;
    if (has_eq) {
      value = opt.substr(eq + 1);
      opt = opt.substr(0, eq);
    }
    if (opt.rfind("--", 0) != 0 && opt.rfind("-", 0) == 0) opt = "-" + opt;  // -bind-to
    const bool takes_value = opt == "--bind-to" || opt == "--map-by";
    if (takes_value && !has_eq) {
      if (i + 1 >= words.size()) {
        return InvalidArgument("--binding-args: " + opt + " needs a value");
      }
      value = words[++i];
    }
    if (opt == "--bind-to") {
      std::string v = value;
      const size_t colon = v.find(':');
      if (colon != std::string::npos) {
        // hvd always allows more ranks than cores (and says so), as mpirun's overload-allowed.
        if (v.substr(colon + 1) != "overload-allowed") {
          return InvalidArgument("--binding-args: --bind-to " + value + ": hvd knows no '" +
                                 v.substr(colon + 1) + "' qualifier (overload is always allowed)");
        }
        v = v.substr(0, colon);
      }
      BindTo b;
      Status s = ParseBindTo(v, &b);
      if (!s.ok()) return s.WithContext("--binding-args: --bind-to");
      *bind_to = BindToName(b);
    } else if (opt == "--map-by") {
      if (value != "slot" && value != "core") {
        return InvalidArgument("--binding-args: --map-by " + value +
                               ": hvd places ranks host by host, filling each host's slots in "
                               "order (mpirun's --map-by slot); choose the hosts and their rank "
                               "counts with -H host1:N,host2:M");
      }
    } else if (opt == "--cpu-list" || opt == "--cpu-set") {
      return InvalidArgument("--binding-args: " + opt +
                             ": give hvdrun --cpu-list \"0-3;4-7\" instead (one CPU set per "
                             "local rank)");
    } else {
      return InvalidArgument("--binding-args: '" + words[i] +
                             "' is not a binding option hvd implements; it accepts --bind-to "
                             "core|socket|none and --map-by slot");
    }
  }
  return Status::OK();
}

}  // namespace hvd::control
