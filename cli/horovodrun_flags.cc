#include "cli/horovodrun_flags.h"

#include <cctype>
#include <cmath>
#include <cstdio>

#include "cli/config_file.h"
#include "control/host_spec.h"

namespace hvd::cli {
namespace {

constexpr const char* kGroup =
    "horovodrun compatibility (docs/deployment.md, \"Coming from "
    "horovodrun\")";

constexpr const char* kAutotune =
    "hvd has no autotuning (its defaults were measured, docs/performance.md); instead, set "
    "--fusion-threshold-mb and --cycle-time-ms by hand";
constexpr const char* kElastic =
    "hvd has no elastic mode: a job runs on a fixed set of -np ranks; instead, --max-restarts N "
    "runs a failed job again, all ranks (docs/reliability.md)";
constexpr const char* kTimestamp =
    "hvd's log lines carry no timestamp; instead, --prefix-output-with-timestamp timestamps "
    "every line of the ranks' output";

std::string Num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

}  // namespace

void HorovodFlags::Register(control::FlagSet* flags) {
  // Horovod's spellings of flags hvd has.
  flags->Alias("--hostfile", "-hostfile");
  flags->Alias("--network-interface", "--network-interfaces");
  flags->Alias("--stall-check-time", "--stall-check-warning-time-seconds");

  flags->Group(kGroup);
  flags->ConfigFile("--config-file", &config_file, LoadHorovodConfig,
                    "Horovod's YAML file of parameters (params, timeline, stall_check, "
                    "library_options, logging); flags on the command line win over it");
  flags->Int("--cache-capacity", &cache_capacity,
             "response cache entries (HVD_CACHE_CAPACITY, default 1024); 0 disables the cache");
  flags->Bool("--hierarchical-allreduce", &hierarchical_allreduce,
              "HVD_HIERARCHICAL_ALLREDUCE=1 (hvd's default: multi-host jobs with equal ranks per "
              "host reduce within hosts first)");
  flags->Bool("--no-hierarchical-allreduce", &no_hierarchical_allreduce,
              "HVD_HIERARCHICAL_ALLREDUCE=0: one flat ring");
  flags->Bool("--hierarchical-allgather", &hierarchical_allgather,
              "accepted with a note: hvd's allgather is flat (one ring, shared memory within a "
              "host); it has no hierarchical variant");
  flags->Bool("--no-hierarchical-allgather", &no_hierarchical_allgather,
              "accepted: the allgather is flat");
  flags->Bool("--timeline-mark-cycles", &timeline_mark_cycles,
              "HVD_TIMELINE_MARK_CYCLES=1: mark negotiation cycles (needs --timeline-filename)");
  flags->Bool("--no-timeline-mark-cycles", &no_timeline_mark_cycles, "HVD_TIMELINE_MARK_CYCLES=0");
  flags->Bool("--no-stall-check", &no_stall_check,
              "HVD_STALL_CHECK_TIME_SECONDS=0: no stall warnings (--stall-check: on, the default)");
  flags->Bool("--stall-check", &stall_check, "the stall check stays on (the default)");
  flags->Double("--stall-check-shutdown-time-seconds", &stall_shutdown_seconds,
                "HVD_STALL_SHUTDOWN_TIME_SECONDS: fail a tensor stalled this long (0: never)");
  flags->Double("--gloo-timeout-seconds", &gloo_timeout_seconds,
                "HVD_PEER_TIMEOUT_SECONDS: a peer that moves no byte this long while a "
                "collective waits on it fails the job (default 60)");
  flags->String("--log-level", &log_level,
                "HVD_LOG_LEVEL: TRACE, DEBUG, INFO, WARNING, ERROR or FATAL (= ERROR)");
  flags->Bool("--log-without-timestamp", &log_without_timestamp,
              "accepted: hvd's log lines carry no timestamp (--log-hide-timestamp: the same)");
  flags->Alias("--log-without-timestamp", "--log-hide-timestamp");
  flags->Refused("--log-with-timestamp,--no-log-hide-timestamp", "", kTimestamp);
  flags->Bool("--gloo", &gloo, "accepted: hvd has one backend of its own (no Gloo, no MPI)");
  flags->Bool("--mpi", &mpi, "accepted: hvd has one backend of its own (no Gloo, no MPI)");
  flags->Bool("--mpi-threads-disable", &mpi_threads_disable,
              "accepted: hvd uses no MPI (--no-mpi-threads-disable: the same)");
  flags->Alias("--mpi-threads-disable", "--no-mpi-threads-disable");
  flags->Refused("--jsrun", "",
                 "hvd starts ranks through its own agents, not jsrun; instead, run hvd-agent on "
                 "the LSF hosts and pass --launcher HOST:PORT (docs/deployment.md)");
  flags->Refused("--mpi-args", "ARGS",
                 "hvd does not run mpirun; instead, pass variables with -x NAME=VALUE and bind "
                 "ranks to CPUs with --bind-to");
  flags->Bool("--tcp", &tcp,
              "NCCL_IB_DISABLE=1, as horovodrun; hvd's own links are TCP (shared memory within "
              "a host) already");
  flags->Refused("--num-nccl-streams", "N",
                 "hvd picks its GPU data path itself and has no NCCL streams to set; instead, "
                 "drop the flag (docs/gpu.md)");
  flags->Bool("--disable-cache", &disable_cache,
              "accepted: hvdrun caches no start-up checks (horovodrun's ~/.horovod cache); it "
              "checks the hosts every time");
  flags->Int("--slots-per-host", &slots_per_host,
             "slots of each -H/--hostfile host listed without a count (default 1)");
  flags->Bool("--no-autotune", &no_autotune, "accepted: hvd never autotunes");
  flags->Refused(
      "--autotune,--autotune-log-file,--autotune-warmup-samples,--autotune-steps-per-sample,"
      "--autotune-bayes-opt-max-samples,--autotune-gaussian-process-noise",
      "", kAutotune);
  flags->Refused(
      "--min-np,--min-num-proc,--max-np,--max-num-proc,--elastic-timeout,--reset-limit,"
      "--blacklist-cooldown-range,--host-discovery-script",
      "", kElastic);
  flags->Group("");
}

Status AddHorovodEnv(const HorovodFlags& h, const control::FlagSet& flags,
                     std::map<std::string, std::string>* env) {
  auto given = [&](const char* name) { return flags.Given(name); };
  auto set = [&](const char* flag, const char* var, const std::string& value) -> Status {
    if (env->count(var)) {
      return InvalidArgument(flags.GivenAs(flag) + " and -x " + var + " both set " + var +
                             "; keep one of them");
    }
    (*env)[var] = value;
    return Status::OK();
  };
  auto exclusive = [&](const char* a, const char* b) -> Status {
    if (given(a) && given(b)) {
      return InvalidArgument(flags.GivenAs(a) + " and " + flags.GivenAs(b) +
                             " contradict each other; keep one");
    }
    return Status::OK();
  };
  HVD_RETURN_IF_ERROR(exclusive("--hierarchical-allreduce", "--no-hierarchical-allreduce"));
  HVD_RETURN_IF_ERROR(exclusive("--hierarchical-allgather", "--no-hierarchical-allgather"));
  HVD_RETURN_IF_ERROR(exclusive("--timeline-mark-cycles", "--no-timeline-mark-cycles"));
  HVD_RETURN_IF_ERROR(exclusive("--stall-check", "--no-stall-check"));
  HVD_RETURN_IF_ERROR(exclusive("--gloo", "--mpi"));

  if (given("--cache-capacity")) {
    if (h.cache_capacity < 0 || h.cache_capacity > (int64_t{1} << 30)) {
      return InvalidArgument("--cache-capacity must be between 0 (no cache) and 1073741824, not " +
                             std::to_string(h.cache_capacity));
    }
    HVD_RETURN_IF_ERROR(
        set("--cache-capacity", "HVD_CACHE_CAPACITY", std::to_string(h.cache_capacity)));
  }
  if (given("--hierarchical-allreduce")) {
    HVD_RETURN_IF_ERROR(set("--hierarchical-allreduce", "HVD_HIERARCHICAL_ALLREDUCE",
                            h.hierarchical_allreduce ? "1" : "0"));
  } else if (given("--no-hierarchical-allreduce")) {
    HVD_RETURN_IF_ERROR(set("--no-hierarchical-allreduce", "HVD_HIERARCHICAL_ALLREDUCE",
                            h.no_hierarchical_allreduce ? "0" : "1"));
  }
  for (const char* flag : {"--timeline-mark-cycles", "--no-timeline-mark-cycles"}) {
    if (!given(flag)) continue;
    const bool on = flag[2] == 't' ? h.timeline_mark_cycles : !h.no_timeline_mark_cycles;
    if (on && !env->count("HVD_TIMELINE") && !env->count("HOROVOD_TIMELINE")) {
      return InvalidArgument(flags.GivenAs(flag) +
                             " marks cycles in the timeline: pass --timeline-filename FILE too");
    }
    HVD_RETURN_IF_ERROR(set(flag, "HVD_TIMELINE_MARK_CYCLES", on ? "1" : "0"));
  }
  if (given("--no-stall-check") && h.no_stall_check) {
    for (const char* other : {"--stall-check-time", "--stall-timeout"}) {
      if (given(other)) {
        return InvalidArgument("--no-stall-check turns off the stall check that " +
                               flags.GivenAs(other) + " configures; keep one of them");
      }
    }
    HVD_RETURN_IF_ERROR(set("--no-stall-check", "HVD_STALL_CHECK_TIME_SECONDS", "0"));
  }
  if (given("--stall-check-shutdown-time-seconds")) {
    const double v = h.stall_shutdown_seconds;
    if (!(v >= 0) || v > 30 * 86400) {
      return InvalidArgument(flags.GivenAs("--stall-check-shutdown-time-seconds") +
                             " must be a number of seconds >= 0 (0: never), not " + Num(v));
    }
    HVD_RETURN_IF_ERROR(
        set("--stall-check-shutdown-time-seconds", "HVD_STALL_SHUTDOWN_TIME_SECONDS", Num(v)));
  }
  if (given("--gloo-timeout-seconds")) {
    const double v = h.gloo_timeout_seconds;
    if (!(v > 0) || v > 30 * 86400) {
      return InvalidArgument(flags.GivenAs("--gloo-timeout-seconds") +
                             " must be a number of seconds above 0, not " + Num(v));
    }
    HVD_RETURN_IF_ERROR(set("--gloo-timeout-seconds", "HVD_PEER_TIMEOUT_SECONDS", Num(v)));
  }
  if (given("--log-level")) {
    std::string level = h.log_level;
    for (char& c : level) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (level == "fatal") level = "error";  // hvd has no fatal-only level
    if (level != "trace" && level != "debug" && level != "info" && level != "warning" &&
        level != "error") {
      return InvalidArgument(flags.GivenAs("--log-level") + " '" + h.log_level +
                             "' is not one of TRACE, DEBUG, INFO, WARNING, ERROR, FATAL");
    }
    HVD_RETURN_IF_ERROR(set("--log-level", "HVD_LOG_LEVEL", level));
  }
  if (given("--tcp") && h.tcp) HVD_RETURN_IF_ERROR(set("--tcp", "NCCL_IB_DISABLE", "1"));
  return Status::OK();
}

Status SlotsPerHost(const HorovodFlags& h, const control::FlagSet* flags, bool have_hosts,
                    int* slots) {
  *slots = 1;
  if (flags == nullptr || !flags->Given("--slots-per-host")) return Status::OK();
  if (h.slots_per_host < 1 || h.slots_per_host > control::kMaxSlotsPerHost) {
    return InvalidArgument("--slots-per-host must be between 1 and " +
                           std::to_string(control::kMaxSlotsPerHost) + ", not " +
                           std::to_string(h.slots_per_host));
  }
  if (!have_hosts) {
    return InvalidArgument(
        "--slots-per-host sets the slots of the hosts of -H or --hostfile listed without a "
        "count; pass one of them (without them, -np N ranks run on this host)");
  }
  *slots = static_cast<int>(h.slots_per_host);
  return Status::OK();
}

std::vector<std::string> HorovodNotes(const control::FlagSet& flags) {
  std::vector<std::string> notes;
  std::string backend;
  for (const char* f : {"--gloo", "--mpi", "--mpi-threads-disable"}) {
    if (flags.Given(f)) backend += (backend.empty() ? "" : ", ") + flags.GivenAs(f);
  }
  if (!backend.empty()) {
    notes.push_back(backend +
                    ": hvd has one backend, its own (TCP between hosts, shared memory within "
                    "one; no Gloo, no MPI), so there is nothing to choose; the job runs on it");
  }
  if (flags.Given("--hierarchical-allgather")) {
    notes.push_back(flags.GivenAs("--hierarchical-allgather") +
                    ": hvd's allgather is flat (one ring over every rank, shared memory within a "
                    "host) and has no hierarchical variant; the job runs with the flat one");
  }
  return notes;
}

void RunCompatFlags::Register(control::FlagSet* flags) {
  flags->Alias("--ssh-identity", "--ssh-identity-file");
  flags->Group(kGroup);
  flags->Bool("--check-build,-cb", &check_build, "what this build supports, then exit");
  flags->Bool("--version", &version, "hvdrun's version, then exit (horovodrun's -v)");
  flags->Bool("--prefix-output-with-timestamp,-prefix-timestamp", &prefix_timestamp,
              "start every line of the ranks' output with the local time, as horovodrun's "
              "(\"Tue Jan  2 15:04:05 2024[1]<stdout>:...\")");
  flags->Group("");
}

}  // namespace hvd::cli
