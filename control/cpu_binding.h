// CPU binding of ranks, as mpirun's --bind-to and --cpu-list: which CPUs each local rank of a host
// may run on. Oversubscribed ranks that the scheduler moves between cores thrash their caches; a
// fixed block of cores per rank does not.
//
// Policies (hvdrun --bind-to, --cpu-list, --binding-args; carried to the agent in the worker
// environment as HVD_BIND_TO and HVD_CPU_LIST, docs/configuration.md):
//   none    no binding (the default): the rank inherits the agent's CPUs.
//   core    local rank i gets its own block of floor(cores / local_size) cores (every hardware
//           thread of each), counting only the cores the agent may use (sched_getaffinity: a
//           cgroup cpuset or taskset restricts it). More ranks than cores: rank i gets core
//           i mod cores, and the plan says so (BindingPlan::note).
//   socket  local rank i gets every allowed CPU of socket i mod sockets.
//   list    local rank i gets entry i of "0-3;4-7" (';' between ranks, ',' and '-' within one);
//           fewer entries than local ranks is an error.
// The planning is pure (tests use fake topologies); ReadCpuTopology reads /sys.
#pragma once

#include <string>
#include <vector>

#include "hvd/status.h"

namespace hvd::control {

// The worker environment variables that carry the policy from hvdrun to the agent.
inline constexpr char kBindToEnv[] = "HVD_BIND_TO";
inline constexpr char kCpuListEnv[] = "HVD_CPU_LIST";

enum class BindTo { kNone, kCore, kSocket };

struct BindingPolicy {
  BindTo bind_to = BindTo::kNone;
  std::vector<std::vector<int>> cpu_lists;  // --cpu-list, one entry per local rank; wins
  bool none() const { return bind_to == BindTo::kNone && cpu_lists.empty(); }
};

struct CpuInfo {
  int cpu = 0;      // the logical CPU number (what sched_setaffinity takes)
  int core = 0;     // core_id: hardware threads of one core share it (within a package)
  int package = 0;  // physical_package_id: the socket
};

// "core", "socket" or "none" (also mpirun's "hwthread"/"cpu"... are refused, naming the choices).
Status ParseBindTo(const std::string& text, BindTo* out);
const char* BindToName(BindTo b);
// One CPU set: "0-3,8,10-11". Errors name the set and what is wrong in it.
Status ParseCpuSet(const std::string& text, std::vector<int>* cpus);
// "0-3;4-7": one set per local rank. Errors name the entry ("entry 2 (\"4-x\")").
Status ParseCpuList(const std::string& text, std::vector<std::vector<int>>* lists);
// Sorted, ranges collapsed: {0,1,2,3,8} -> "0-3,8".
std::string FormatCpuSet(std::vector<int> cpus);

// The policy from the values of HVD_BIND_TO and HVD_CPU_LIST (empty: not set). Both set (other
// than "none") is an error: a list says exactly where each rank goes. Errors name the variable.
Status PolicyFromValues(const std::string& bind_to, const std::string& cpu_list,
                        BindingPolicy* policy);

struct BindingPlan {
  std::vector<int> cpus;  // empty: do not bind
  std::string note;       // something to say once per host (oversubscription); empty: nothing
};

// Local rank `local_rank` of `local_size` on a host with `topology`, of whose CPUs `allowed` may
// be used. Errors (FailedPrecondition) name the policy and what the host lacks.
Status PlanBinding(const BindingPolicy& policy, const std::vector<CpuInfo>& topology,
                   const std::vector<int>& allowed, int local_rank, int local_size,
                   BindingPlan* plan);

// The CPUs under `root` (normally "/sys/devices/system/cpu"): every cpuN with its topology; a CPU
// without topology files counts as its own core on package 0.
Status ReadCpuTopology(const std::string& root, std::vector<CpuInfo>* cpus);
// This process's allowed CPUs (sched_getaffinity).
Status AllowedCpus(std::vector<int>* cpus);

// mpirun's binding arguments as horovodrun's --binding-args passes them ("--bind-to core
// --map-by slot"): sets *bind_to ("" when not given). Accepts --bind-to/-bind-to X (also X=...)
// and --map-by/-map-by slot|core (hvd's placement is by slot); refuses every other mapping and
// option, naming it and what hvd does instead.
Status ParseBindingArgs(const std::string& args, std::string* bind_to);

}  // namespace hvd::control
