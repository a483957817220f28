// The job-describing flags `hvdrun` (run mode) and `hvdrun submit` share, and how they become a
// JobSpec: -np, -H/--hostfile, -x, the runtime knobs mapped to HVD_* variables, the working
// directory and the program, resolved the way a shell would. Everything a user can get wrong here
// is caught before anything is submitted, with a message that names the flag.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "cli/binding_flags.h"
#include "cli/elastic_flags.h"
#include "cli/horovodrun_flags.h"
#include "cli/program_path.h"
#include "control/flags.h"
#include "control/host_spec.h"
#include "control/job_model.h"
#include "hvd/status.h"

namespace hvd::cli {

// What BuildJobSpec reads from the process, injectable so tests control it.
struct HostEnvironment {
  std::function<const char*(const char*)> getenv;  // for -x VAR and PATH
  std::string cwd;                                 // default working dir, base of relative paths
  std::vector<std::string> local_names;            // names of this host (LocalHostNames())

  static HostEnvironment Current();
};

// gethostname() (and its short form), "localhost", "127.0.0.1" and "::1".
std::vector<std::string> LocalHostNames();
// Whether `host` is one of `local_names` (case-insensitive) or any 127.x.y.z address.
bool IsLocalHost(const std::string& host, const std::vector<std::string>& local_names);

struct JobFlags {
  int64_t np = 0;
  std::string hosts;             // -H
  std::string hostfile;          // --hostfile
  std::vector<std::string> env;  // -x VAR[=VALUE]
  std::string working_dir;
  std::string name;
  double fusion_threshold_mb = 0;
  double cycle_time_ms = 0;
  std::string timeline_filename;
  // Seconds; the job's limits (JobSpec), given only when the flag is.
  double start_timeout = 0;
  double stall_timeout = 0;
  double stall_check_time = 0;
  double kill_grace = 0;
  double queue_timeout = 0;  // --queue-timeout; 0: wait for slots as long as it takes
  int64_t max_restarts = 0;
  std::string network_interfaces;  // --network-interface (default $HVD_IFACE)
  HorovodFlags horovod;            // horovodrun's flags (cli/horovodrun_flags.h)
  ElasticFlags elastic;            // --min-np, --max-np, ... (cli/elastic_flags.h)
  BindingFlags binding;            // --bind-to, --cpu-list, ... (cli/binding_flags.h)
  // torchrun's --nproc-per-node and --nnodes, as given (cli/torchrun_flags.h).
  std::string nproc_per_node;
  std::string nnodes;
  bool standalone = false;  // torchrun's --standalone: accepted with a note
  // --run-as USER: the user every rank runs as (JobSpec.run_as); the agents must run as root.
  std::string run_as;
  // --gpu-isolation: each rank sees only its slot's GPU (JobSpec.gpu_isolation); default: every
  // rank sees all of its host's GPUs and picks one by local rank, as horovodrun's (docs/gpu.md).
  bool gpu_isolation = false;

  // Registers the flags; `flags` must outlive BuildJobSpec (it tells which knobs were given).
  void Register(control::FlagSet* flags);
  const control::FlagSet* flag_set = nullptr;
};

// What hvdrun says once, on stderr, before the job starts, about accepted flags of horovodrun
// (HorovodNotes) and torchrun (TorchrunNotes) whose meaning hvd has by construction or in part.
std::vector<std::string> JobNotes(const JobFlags& flags);

// Where the program is checked: run mode checks it whenever it will run here; cluster mode only
// when every rank runs on this host (otherwise the agent that execs it reports a bad path).
enum class ProgramCheck { kAlways, kWhenLocal };

// Builds the spec from the flags and `program` (argv[0] first, then its arguments). Errors are
// usage errors (InvalidArgument), except a missing or non-executable program (NotFound /
// FailedPrecondition), whose message is "./trian: No such file or directory" like a shell's.
Status BuildJobSpec(const JobFlags& flags, const std::vector<std::string>& program,
                    const HostEnvironment& host, ProgramCheck check, control::JobSpec* spec);

// -x entries to a map: "VAR=VALUE", or "VAR" copied from `getenv` (an error naming VAR when it
// is unset there).
Status ParseEnvFlags(const std::vector<std::string>& entries,
                     const std::function<const char*(const char*)>& getenv,
                     std::map<std::string, std::string>* env);

// The embedded agent for a local run: its host name ("" = gethostname()) and slots. Without -H,
// np slots on this host; with -H, the single entry naming this host, under the name the user
// wrote (so placement matches it). InvalidArgument when -H names another host: only a cluster
// can run ranks there. `hosts_from`: what named the hosts, for its errors ("-H", "--hostfile F",
// "--host-discovery-script S's output").
Status EmbeddedAgentFor(const control::JobSpec& spec, const std::vector<std::string>& local_names,
                        const std::string& hosts_from, std::string* agent_host, int* slots);

}  // namespace hvd::cli
