// CPU binding flags of hvdrun run and submit, as mpirun's and horovodrun's: --bind-to
// core|socket|none, --cpu-list "0-3;4-7", horovodrun's --binding-args "--bind-to core --map-by
// slot" (the mpirun subset hvd implements; the rest is refused by name) and --thread-affinity
// (the runtime's background thread, HVD_THREAD_AFFINITY). They become worker environment
// variables (HVD_BIND_TO, HVD_CPU_LIST, HVD_THREAD_AFFINITY): each agent plans its ranks' CPUs
// from them before exec (control/cpu_binding.h, agent/process_spawn.h).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "control/flags.h"
#include "control/host_spec.h"
#include "hvd/status.h"

namespace hvd::cli {

struct BindingFlags {
  std::string bind_to;
  std::string cpu_list;
  std::string binding_args;
  std::string thread_affinity;

  void Register(control::FlagSet* flags);
};

// Checks the flags and sets the variables in *env (an error when -x set one of them too).
// `local_ranks`: the most ranks any one host will run when known (0: unknown), so a --cpu-list
// with too few entries is refused up front; `check_here`: every rank runs on this host, so the
// list's CPUs are checked against this process's allowed CPUs (the embedded agent's) too.
Status AddBindingEnv(const BindingFlags& b, const control::FlagSet& flags, int local_ranks,
                     bool check_here, std::map<std::string, std::string>* env);

// The most ranks one host gets when `np` ranks fill `hosts` in order (0 when hosts is empty).
int MaxLocalRanks(const std::vector<control::HostSlots>& hosts, int64_t np);

}  // namespace hvd::cli
