#include "cli/horovodrun_flags.h"

#include <cctype>
#include <cmath>
#include <cstdio>

#include "base/logging.h"
#include "base/settings.h"
#include "cli/config_file.h"
#include "control/host_spec.h"

namespace hvd::cli {
namespace {

constexpr const char* kGroup =
    "horovodrun compatibility (docs/migrating.md, \"Coming from "
    "horovodrun\")";

constexpr const char* kAutotune =
    "hvd has no autotuning (its defaults were measured, docs/performance.md); instead, set "
    "--fusion-threshold-mb and --cycle-time-ms by hand";
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
             "response cache entries (HVD_CACHE_CAPACITY, default 1024, at most 1048576); 0 "
             "disables the cache");
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
  flags->Bool("--stall-check", &stall_check,
              "the stall check stays on (the default); --stall-check=false: off");
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
  flags->Group("");
}

bool StallCheckOff(const HorovodFlags& h, const control::FlagSet& flags) {
  return (flags.Given("--no-stall-check") && h.no_stall_check) ||
         (flags.Given("--stall-check") && !h.stall_check);
}

bool SetByX(const std::map<std::string, std::string>& x_env, const std::string& var) {
  // hvd's runtime reads HOROVOD_* for the HVD_* of the same name (docs/configuration.md).
  return x_env.count(var) > 0 ||
         (var.rfind("HVD_", 0) == 0 && x_env.count("HOROVOD_" + var.substr(4)) > 0);
}

Status SetKnob(const std::string& given_as, const std::string& var, const std::string& value,
               std::map<std::string, std::string>* env) {
  // -x HOROVOD_X sets HVD_X as well (the runtime reads both): it was dropped silently, the
  // flag's value winning.
  const std::string horovod = var.rfind("HVD_", 0) == 0 ? "HOROVOD_" + var.substr(4) : "";
  const std::string by_x = env->count(var)                           ? var
                           : !horovod.empty() && env->count(horovod) ? horovod
                                                                     : "";
  if (!by_x.empty()) {
    return InvalidArgument(given_as + " and -x " + by_x + " both set " + var +
                           "; keep one of them");
  }
  (*env)[var] = value;
  return Status::OK();
}

Status AddHorovodEnv(const HorovodFlags& h, const control::FlagSet& flags,
                     const std::map<std::string, std::string>& x_env,
                     std::map<std::string, std::string>* env) {
  auto given = [&](const char* name) { return flags.Given(name); };
  // A config file's setting yields to -x silently: the command line wins over the file.
  auto use = [&](const char* flag, const char* var) {
    return given(flag) && !(flags.FromConfig(flag) && SetByX(x_env, var));
  };
  auto set = [&](const char* flag, const char* var, const std::string& value) {
    return SetKnob(flags.GivenAs(flag), var, value, env);
  };
  // A switch and its --no- form contradict each other only when they say opposite things
  // (--gloo=false --mpi says one thing: mpi).
  auto on_off = [&](const char* on, bool on_value, const char* off, bool off_value) -> Status {
    if (given(on) && given(off) && on_value == off_value) {
      return InvalidArgument(flags.GivenAs(on) + " and " + flags.GivenAs(off) +
                             " contradict each other; keep one");
    }
    return Status::OK();
  };
  HVD_RETURN_IF_ERROR(on_off("--hierarchical-allreduce", h.hierarchical_allreduce,
                             "--no-hierarchical-allreduce", h.no_hierarchical_allreduce));
  HVD_RETURN_IF_ERROR(on_off("--hierarchical-allgather", h.hierarchical_allgather,
                             "--no-hierarchical-allgather", h.no_hierarchical_allgather));
  HVD_RETURN_IF_ERROR(on_off("--timeline-mark-cycles", h.timeline_mark_cycles,
                             "--no-timeline-mark-cycles", h.no_timeline_mark_cycles));
  HVD_RETURN_IF_ERROR(on_off("--stall-check", h.stall_check, "--no-stall-check", h.no_stall_check));
  if (given("--gloo") && given("--mpi") && h.gloo && h.mpi) {  // two controllers, not on/off
    return InvalidArgument(flags.GivenAs("--gloo") + " and " + flags.GivenAs("--mpi") +
                           " contradict each other; keep one");
  }
  if (given("--no-autotune") && !h.no_autotune) {
    return InvalidArgument(flags.GivenAs("--no-autotune") +
                           "=false asks for autotuning: " + kAutotune);
  }
  if (given("--log-without-timestamp") && !h.log_without_timestamp) {
    return InvalidArgument(flags.GivenAs("--log-without-timestamp") +
                           "=false asks for timestamps: " + kTimestamp);
  }

  if (use("--cache-capacity", "HVD_CACHE_CAPACITY")) {
    if (h.cache_capacity < 0 || h.cache_capacity > base::kMaxCacheCapacity) {
      return InvalidArgument(flags.GivenAs("--cache-capacity") +
                             " must be between 0 (no cache) and " +
                             std::to_string(base::kMaxCacheCapacity) + " entries, not " +
                             std::to_string(h.cache_capacity));
    }
    HVD_RETURN_IF_ERROR(
        set("--cache-capacity", "HVD_CACHE_CAPACITY", std::to_string(h.cache_capacity)));
  }
  if (use("--hierarchical-allreduce", "HVD_HIERARCHICAL_ALLREDUCE")) {
    HVD_RETURN_IF_ERROR(set("--hierarchical-allreduce", "HVD_HIERARCHICAL_ALLREDUCE",
                            h.hierarchical_allreduce ? "1" : "0"));
  } else if (use("--no-hierarchical-allreduce", "HVD_HIERARCHICAL_ALLREDUCE")) {
    HVD_RETURN_IF_ERROR(set("--no-hierarchical-allreduce", "HVD_HIERARCHICAL_ALLREDUCE",
                            h.no_hierarchical_allreduce ? "0" : "1"));
  }
  // One of the pair decides (they agree when both are given: checked above).
  const bool mark_flag_given = given("--timeline-mark-cycles");
  const char* mark = mark_flag_given ? "--timeline-mark-cycles" : "--no-timeline-mark-cycles";
  if (use(mark, "HVD_TIMELINE_MARK_CYCLES")) {
    const bool on = mark_flag_given ? h.timeline_mark_cycles : !h.no_timeline_mark_cycles;
    if (on && !env->count("HVD_TIMELINE") && !env->count("HOROVOD_TIMELINE")) {
      return InvalidArgument(flags.GivenAs(mark) +
                             " marks cycles in the timeline: pass --timeline-filename FILE too");
    }
    HVD_RETURN_IF_ERROR(set(mark, "HVD_TIMELINE_MARK_CYCLES", on ? "1" : "0"));
  }
  if (StallCheckOff(h, flags)) {
    const char* off = given("--no-stall-check") ? "--no-stall-check" : "--stall-check";
    for (const char* other : {"--stall-check-time", "--stall-timeout"}) {
      // Both typed: a contradiction. With a config file involved the disable wins, as in Horovod
      // (a config's stall_check.enabled: false with its own warning_time_seconds is valid there;
      // a command-line --stall-check-time overrides the config's enabled: false, config_file.cc).
      if (given(other) && !flags.FromConfig(off) && !flags.FromConfig(other)) {
        return InvalidArgument(flags.GivenAs(off) + " turns off the stall check that " +
                               flags.GivenAs(other) + " configures; keep one of them");
      }
    }
    if (use(off, "HVD_STALL_CHECK_TIME_SECONDS")) {
      HVD_RETURN_IF_ERROR(set(off, "HVD_STALL_CHECK_TIME_SECONDS", "0"));
    }
  }
  if (use("--stall-check-shutdown-time-seconds", "HVD_STALL_SHUTDOWN_TIME_SECONDS")) {
    const double v = h.stall_shutdown_seconds;
    if (!(v >= 0) || v > 30 * 86400) {
      return InvalidArgument(flags.GivenAs("--stall-check-shutdown-time-seconds") +
                             " must be a number of seconds >= 0 (0: never), not " + Num(v));
    }
    HVD_RETURN_IF_ERROR(
        set("--stall-check-shutdown-time-seconds", "HVD_STALL_SHUTDOWN_TIME_SECONDS", Num(v)));
  }
  if (use("--gloo-timeout-seconds", "HVD_PEER_TIMEOUT_SECONDS")) {
    const double v = h.gloo_timeout_seconds;
    if (!(v > 0) || v > 30 * 86400) {
      return InvalidArgument(flags.GivenAs("--gloo-timeout-seconds") +
                             " must be a number of seconds above 0, not " + Num(v));
    }
    HVD_RETURN_IF_ERROR(set("--gloo-timeout-seconds", "HVD_PEER_TIMEOUT_SECONDS", Num(v)));
  }
  if (use("--log-level", "HVD_LOG_LEVEL")) {
    std::string level = h.log_level;
    for (char& c : level) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (level == "fatal") level = "error";  // hvd has no fatal-only level
    base::LogLevel parsed;
    if (level.empty() || !base::ParseLogLevel(level, &parsed)) {
      return InvalidArgument(flags.GivenAs("--log-level") + " '" + h.log_level +
                             "' is not one of TRACE, DEBUG, INFO, WARNING, ERROR, FATAL");
    }
    HVD_RETURN_IF_ERROR(set("--log-level", "HVD_LOG_LEVEL", level));
  }
  if (given("--tcp") && h.tcp) HVD_RETURN_IF_ERROR(set("--tcp", "NCCL_IB_DISABLE", "1"));
  // Every rank's hvd::Init() would refuse it, after the job started.
  for (const char* var : {"HVD_LOG_LEVEL", "HOROVOD_LOG_LEVEL"}) {
    const auto it = x_env.find(var);
    base::LogLevel parsed;
    if (it != x_env.end() && !base::ParseLogLevel(it->second, &parsed)) {
      return InvalidArgument(std::string("-x ") + var + "=" + it->second +
                             " names no log level: give trace, debug, info, warning or error");
    }
  }
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

std::vector<std::string> HorovodNotes(const HorovodFlags& h, const control::FlagSet& flags) {
  std::vector<std::string> notes;
  std::string backend;
  // --gloo=false asks for nothing; --mpi-threads-disable's value is about MPI, which hvd lacks.
  const std::pair<const char*, bool> backend_flags[] = {
      {"--gloo", h.gloo}, {"--mpi", h.mpi}, {"--mpi-threads-disable", true}};
  for (const auto& [f, on] : backend_flags) {
    if (flags.Given(f) && on) backend += (backend.empty() ? "" : ", ") + flags.GivenAs(f);
  }
  if (!backend.empty()) {
    notes.push_back(backend +
                    ": hvd has one backend, its own (TCP between hosts, shared memory within "
                    "one; no Gloo, no MPI), so there is nothing to choose; the job runs on it");
  }
  if (flags.Given("--hierarchical-allgather") && h.hierarchical_allgather) {
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
