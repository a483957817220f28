#include "cli/binding_flags.h"

#include <algorithm>
#include <sstream>

#include "cli/horovodrun_flags.h"
#include "control/cpu_binding.h"

namespace hvd::cli {

void BindingFlags::Register(control::FlagSet* flags) {
  flags->String("--bind-to", &bind_to,
                "bind each rank to CPUs, as mpirun: core (a block of whole cores per local rank; "
                "round-robin when ranks outnumber cores), socket (one socket per local rank, "
                "round-robin) or none (the default) (HVD_BIND_TO)");
  flags->String("--cpu-list", &cpu_list,
                "explicit CPUs per local rank, ';' between ranks: \"0-3;4-7\" binds local rank 0 "
                "to CPUs 0-3 and local rank 1 to 4-7 (HVD_CPU_LIST)");
  flags->String("--binding-args", &binding_args,
                "horovodrun's mpirun binding arguments; hvd takes \"--bind-to core|socket|none\" "
                "and \"--map-by slot\" and refuses the rest by name");
  flags->String("--thread-affinity", &thread_affinity,
                "horovodrun's: CPU of each local rank's background thread, comma-separated "
                "(\"0,1,2,3\": local rank i's thread on CPU i) (HVD_THREAD_AFFINITY)");
}

int MaxLocalRanks(const std::vector<control::HostSlots>& hosts, int64_t np) {
  int64_t most = 0;
  for (const control::HostSlots& h : hosts) {
    const int64_t here = std::min<int64_t>(h.slots, np);
    most = std::max(most, here);
    np -= here;
    if (np <= 0) break;
  }
  return static_cast<int>(most);
}

Status AddBindingEnv(const BindingFlags& b, const control::FlagSet& flags, int local_ranks,
                     bool check_here, std::map<std::string, std::string>* env) {
  auto set = [&](const char* flag, const char* var, const std::string& value) {
    return SetKnob(flags.GivenAs(flag), var, value, env);
  };
  std::string bind_to;
  if (flags.Given("--binding-args")) {
    HVD_RETURN_IF_ERROR(control::ParseBindingArgs(b.binding_args, &bind_to));
  }
  if (flags.Given("--bind-to")) {
    control::BindTo parsed;
    HVD_RETURN_IF_ERROR_CTX(control::ParseBindTo(b.bind_to, &parsed), "--bind-to");
    if (!bind_to.empty() && bind_to != control::BindToName(parsed)) {
      return InvalidArgument("--bind-to " + b.bind_to + " and --binding-args \"--bind-to " +
                             bind_to + "\" contradict each other; keep one");
    }
    bind_to = control::BindToName(parsed);
  }
  if (flags.Given("--cpu-list")) {
    control::BindingPolicy policy;
    HVD_RETURN_IF_ERROR(control::PolicyFromValues(bind_to, b.cpu_list, &policy));
    const int n = static_cast<int>(policy.cpu_lists.size());
    if (local_ranks > n) {
      return InvalidArgument("--cpu-list has " + std::to_string(n) + " entr" +
                             (n == 1 ? "y" : "ies") + " but a host runs " +
                             std::to_string(local_ranks) +
                             " ranks; give one CPU set per local rank, separated by ';'");
    }
    if (check_here) {
      std::vector<int> allowed;
      if (control::AllowedCpus(&allowed).ok() && !allowed.empty()) {
        for (int i = 0; i < n; ++i) {
          control::BindingPlan plan;
          Status s = control::PlanBinding(policy, {}, allowed, i, n, &plan);
          if (!s.ok()) return InvalidArgument(s.message());
        }
      }
    }
    HVD_RETURN_IF_ERROR(set("--cpu-list", control::kCpuListEnv, b.cpu_list));
  }
  if (!bind_to.empty() && bind_to != "none") {
    HVD_RETURN_IF_ERROR(set(flags.Given("--bind-to") ? "--bind-to" : "--binding-args",
                            control::kBindToEnv, bind_to));
  }
  if (flags.Given("--thread-affinity")) {
    std::stringstream ss(b.thread_affinity);
    std::string cpu;
    int index = 0;
    while (std::getline(ss, cpu, ',')) {
      std::vector<int> one;
      Status s = control::ParseCpuSet(cpu, &one);
      if (!s.ok() || one.size() != 1) {
        return InvalidArgument("--thread-affinity entry " + std::to_string(index) + " ('" + cpu +
                               "') is not one CPU number; give one CPU per local rank, "
                               "comma-separated (\"0,1,2,3\")");
      }
      ++index;
    }
    if (index == 0) return InvalidArgument("--thread-affinity is empty; give e.g. \"0,1\"");
    HVD_RETURN_IF_ERROR(set("--thread-affinity", "HVD_THREAD_AFFINITY", b.thread_affinity));
  }
  return Status::OK();
}

}  // namespace hvd::cli
