// horovodrun 0.28's command line in hvdrun: every flag of `horovodrun --help` (the checked-in list
// is tests/cli/horovodrun_flags.txt) is either implemented with Horovod's meaning, mapped to the
// HVD_* variable of the same setting (docs/configuration.md), or refused with a message that says
// what hvd does instead; none is accepted and ignored. The flags hvd already had under its own
// name get Horovod's spelling as an alias (-hostfile, --network-interfaces,
// --stall-check-warning-time-seconds, --ssh-identity-file). `hvdrun --help` lists them under
// "horovodrun compatibility"; docs/migrating.md ("Coming from horovodrun") explains each choice.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "control/flags.h"
#include "hvd/status.h"

namespace hvd::cli {

// The job-describing ones, which `hvdrun` and `hvdrun submit` share (JobFlags holds one).
struct HorovodFlags {
  int64_t cache_capacity = 0;
  bool hierarchical_allreduce = false;
  bool no_hierarchical_allreduce = false;
  bool hierarchical_allgather = false;
  bool no_hierarchical_allgather = false;
  bool timeline_mark_cycles = false;
  bool no_timeline_mark_cycles = false;
  bool stall_check = false;
  bool no_stall_check = false;
  double stall_shutdown_seconds = 0;
  double gloo_timeout_seconds = 0;
  std::string log_level;
  bool log_without_timestamp = false;
  bool gloo = false;
  bool mpi = false;
  bool mpi_threads_disable = false;
  bool no_mpi_threads_disable = false;
  bool no_autotune = false;
  bool tcp = false;
  bool disable_cache = false;
  int64_t slots_per_host = 0;
  std::string config_file;

  // Registers them after JobFlags' own flags (it adds aliases to those).
  void Register(control::FlagSet* flags);
};

// Adds the variables the given flags ask for to `env` (which holds -x and the other knobs
// already): HVD_CACHE_CAPACITY, HVD_HIERARCHICAL_ALLREDUCE, HVD_TIMELINE_MARK_CYCLES,
// HVD_STALL_*, HVD_PEER_TIMEOUT_SECONDS, HVD_LOG_LEVEL, NCCL_IB_DISABLE. A variable set twice on
// the command line (flag and -x) and contradicting command-line flags are usage errors naming
// both; a config file's setting yields to -x (`x_env`: the -x variables alone, HVD_* or its
// HOROVOD_* spelling) and its stall_check.enabled: false to nothing in the file, as in Horovod.
Status AddHorovodEnv(const HorovodFlags& h, const control::FlagSet& flags,
                     const std::map<std::string, std::string>& x_env,
                     std::map<std::string, std::string>* env);

// Whether the flags turn the stall check off (--no-stall-check, or --stall-check=false): then
// --stall-check-time sets nothing (a contradiction when both are on the command line).
bool StallCheckOff(const HorovodFlags& h, const control::FlagSet& flags);

// Whether -x (`x_env`) sets `var`, in its HVD_* or HOROVOD_* spelling.
bool SetByX(const std::map<std::string, std::string>& x_env, const std::string& var);
// Sets `var` to `value` in `env` for a flag (`given_as`, as the user wrote it). InvalidArgument
// when -x set it already, as itself or as its HOROVOD_ name (which the runtime reads for it).
Status SetKnob(const std::string& given_as, const std::string& var, const std::string& value,
               std::map<std::string, std::string>* env);

// The slots of a host listed without a count in -H or the hostfile: --slots-per-host, else 1.
// InvalidArgument when it is out of range or there is no -H/--hostfile for it to apply to.
Status SlotsPerHost(const HorovodFlags& h, const control::FlagSet* flags, bool have_hosts,
                    int* slots);

// What hvdrun says once, on stderr, before the job starts: the accepted flags whose Horovod
// meaning hvd has by construction (--gloo, --mpi: hvd has one backend) or only in part
// (--hierarchical-allgather). Empty when none was given, or given =false.
std::vector<std::string> HorovodNotes(const HorovodFlags& h, const control::FlagSet& flags);

// Run mode's own: -cb, --version, --prefix-output-with-timestamp, --ssh-identity-file.
struct RunCompatFlags {
  bool check_build = false;
  bool version = false;
  bool prefix_timestamp = false;

  // After SshFlags::Register (it aliases --ssh-identity).
  void Register(control::FlagSet* flags);
};

// hvdrun's -v is --verbose (as mpirun's); horovodrun's -v is the version. The hint added to the
// "no program" error when -v came alone, the case a horovodrun user types.
inline constexpr const char* kVerboseNotVersion =
    " (-v is --verbose in hvdrun, as in mpirun; horovodrun's -v is hvdrun --version)";

}  // namespace hvd::cli
