#include "cli/job_options.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "base/net.h"
#include "cli/host_discovery.h"
#include "cli/timeline_path.h"
#include "cli/torchrun_flags.h"
#include "control/netif.h"
#include "control/spec_limits.h"
#include "control/worker_env.h"

namespace hvd::cli {
namespace {

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool ValidEnvName(const std::string& name) {
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0]))) return false;
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  return true;
}

Status ReadFile(const std::string& path, std::string* content) {
  std::ifstream in(path);
  if (!in) {
    return InvalidArgument("--hostfile " + path + ": " + std::strerror(errno));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  *content = ss.str();
  return Status::OK();
}

Status ParseHosts(const JobFlags& f, std::vector<control::HostSlots>* hosts) {
  const std::string& script = f.elastic.discovery_script;
  // An empty value (an unset shell variable: -H "$HOSTS") must not run the job here instead.
  const struct {
    const char* flag;
    const std::string& value;
    const char* wanted;
  } host_flags[] = {{"--hosts", f.hosts, "HOST[:SLOTS],..."},
                    {"--hostfile", f.hostfile, "a hostfile"},
                    {"--host-discovery-script", script, "a command"}};
  for (const auto& h : host_flags) {
    const std::string as = f.flag_set != nullptr ? f.flag_set->GivenAs(h.flag) : "";
    if (!as.empty() && h.value.empty()) {
      return InvalidArgument(as + " '' names no host: give " + h.wanted +
                             ", or leave it out to run on this machine");
    }
  }
  if (int n = !f.hosts.empty() + !f.hostfile.empty() + !script.empty(); n > 1) {
    return InvalidArgument(
        "-H, --hostfile and --host-discovery-script all name hosts; pass only one of them");
  }
  int slots = 1;  // of a host listed without a count: horovodrun's --slots-per-host
  HVD_RETURN_IF_ERROR(SlotsPerHost(
      f.horovod, f.flag_set, !f.hosts.empty() || !f.hostfile.empty() || !script.empty(), &slots));
  if (!script.empty()) {  // its first answer is the job's host list (host_discovery.h)
    return RunDiscoveryScript(script, std::chrono::seconds(10), slots, hosts);
  }
  if (!f.hosts.empty()) return control::ParseHostList(f.hosts, hosts, slots).WithContext("-H");
  if (!f.hostfile.empty()) {
    std::string content;
    HVD_RETURN_IF_ERROR(ReadFile(f.hostfile, &content));
    return control::ParseHostfile(content, f.hostfile, hosts, slots);
  }
  return Status::OK();
}

std::string Num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

// What the user wrote for `flag`, for errors: its spelling, or "FILE:LINE (--flag)" when the
// config file set it.
std::string As(const JobFlags& f, const char* flag) {
  const std::string as = f.flag_set != nullptr ? f.flag_set->GivenAs(flag) : "";
  return as.empty() ? std::string(flag) : as;
}

// The runtime knobs (docs/configuration.md) as variables every rank gets. `x_env`: the -x
// variables alone, which win over a config file's setting.
Status AddKnobs(const JobFlags& f, const std::map<std::string, std::string>& x_env,
                std::map<std::string, std::string>* env) {
  auto given = [&](const char* name) { return f.flag_set != nullptr && f.flag_set->Given(name); };
  auto use = [&](const char* flag, const char* var) {
    return given(flag) && !(f.flag_set->FromConfig(flag) && SetByX(x_env, var));
  };
  auto set = [&](const char* flag, const char* var, const std::string& value) {
    return SetKnob(As(f, flag), var, value, env);
  };
  if (use("--fusion-threshold-mb", "HVD_FUSION_THRESHOLD")) {
    const double mb = f.fusion_threshold_mb;
    if (!(mb >= 0) || mb > 1024 * 1024) {
      return InvalidArgument(As(f, "--fusion-threshold-mb") +
                             " must be between 0 (no fusion) and 1048576 MiB, not " + Num(mb));
    }
    const auto bytes = static_cast<int64_t>(std::llround(mb * 1024 * 1024));
    HVD_RETURN_IF_ERROR(
        set("--fusion-threshold-mb", "HVD_FUSION_THRESHOLD", std::to_string(bytes)));
  }
  if (use("--cycle-time-ms", "HVD_CYCLE_TIME")) {
    // The runtime's bound (HVD_CYCLE_TIME, runtime/core/context.cc).
    if (!(f.cycle_time_ms > 0) || f.cycle_time_ms > 60000) {
      return InvalidArgument(As(f, "--cycle-time-ms") +
                             " must be a number of milliseconds above 0 and at most 60000, not " +
                             Num(f.cycle_time_ms));
    }
    HVD_RETURN_IF_ERROR(set("--cycle-time-ms", "HVD_CYCLE_TIME", Num(f.cycle_time_ms)));
  }
  if (use("--timeline-filename", "HVD_TIMELINE")) {
    if (f.timeline_filename.empty()) {
      return InvalidArgument(As(f, "--timeline-filename") + " is empty");
    }
    HVD_RETURN_IF_ERROR(set("--timeline-filename", "HVD_TIMELINE", f.timeline_filename));
  }
  // --no-stall-check wins over a config file's warning time (horovodrun_flags.h); with both on
  // the command line AddHorovodEnv refuses the pair.
  const bool stall_off = f.flag_set != nullptr && StallCheckOff(f.horovod, *f.flag_set);
  const bool time_flag = use("--stall-check-time", "HVD_STALL_CHECK_TIME_SECONDS");
  if (!stall_off && (time_flag || (!given("--stall-check-time") && given("--stall-timeout")))) {
    // The runtime reports a stall after its check time; a stall timeout needs the report first.
    double check = f.stall_check_time;
    if (!time_flag) check = std::min(60.0, std::max(1.0, f.stall_timeout / 2));
    if (!(check > 0) || check > 86400) {
      return InvalidArgument(As(f, "--stall-check-time") +
                             " must be a number of seconds above 0 and at most 86400, not " +
                             Num(check));
    }
    if (time_flag || !SetByX(*env, "HVD_STALL_CHECK_TIME_SECONDS")) {
      HVD_RETURN_IF_ERROR(set("--stall-check-time", "HVD_STALL_CHECK_TIME_SECONDS", Num(check)));
    }
  }
  return Status::OK();
}

// --start-timeout, --stall-timeout, --kill-grace, --queue-timeout, --max-restarts: the launcher
// enforces them.
Status SetLimits(const JobFlags& f, control::JobSpec* spec) {
  auto given = [&](const char* name) { return f.flag_set != nullptr && f.flag_set->Given(name); };
  auto ms = [](double seconds) { return static_cast<int64_t>(std::llround(seconds * 1000)); };
  struct Limit {
    const char* flag;
    double value;
    int64_t* ms;  // stays unset (-1; 0 for the queue) unless the flag is given
  };
  const Limit limits[] = {{"--start-timeout", f.start_timeout, &spec->start_timeout_ms},
                          {"--stall-timeout", f.stall_timeout, &spec->stall_timeout_ms},
                          {"--kill-grace", f.kill_grace, &spec->kill_grace_ms},
                          {"--queue-timeout", f.queue_timeout, &spec->queue_timeout_ms}};
  for (const Limit& l : limits) {
    if (!given(l.flag)) continue;
    if (!(l.value >= 0) || l.value > 30 * 86400) {
      return InvalidArgument(As(f, l.flag) +
                             " must be a number of seconds >= 0 and at most 2592000 (30 days), "
                             "not " +
                             Num(l.value));
    }
    *l.ms = ms(l.value);
  }
  if (f.max_restarts < 0 || f.max_restarts > 1000) {
    return InvalidArgument(As(f, "--max-restarts") + " must be between 0 and 1000, not " +
                           std::to_string(f.max_restarts));
  }
  spec->max_restarts = static_cast<int>(f.max_restarts);
  return Status::OK();
}

// --network-interface, else HVD_IFACE: checked here for its form; whether the hosts have those
// interfaces only their agents know, and the launcher checks that before the job starts.
Status NetworkInterfacesFlag(const JobFlags& f, const HostEnvironment& host,
                             control::JobSpec* spec) {
  const bool given = f.flag_set != nullptr && f.flag_set->Given("--network-interface");
  const char* env = host.getenv("HVD_IFACE");
  const std::string text = given ? f.network_interfaces : (env != nullptr ? env : "");
  std::vector<control::InterfaceSelector> selectors;
  HVD_RETURN_IF_ERROR_CTX(control::ParseInterfaceSelectors(text, &selectors),
                          given ? "--network-interface" : "HVD_IFACE");
  spec->network_interfaces = text;
  return Status::OK();
}

}  // namespace

HostEnvironment HostEnvironment::Current() {
  HostEnvironment h;
  h.getenv = [](const char* name) -> const char* { return std::getenv(name); };
  char buf[PATH_MAX];
  if (getcwd(buf, sizeof(buf)) != nullptr) h.cwd = buf;
  h.local_names = LocalHostNames();
  return h;
}

std::vector<std::string> LocalHostNames() {
  std::vector<std::string> names = {"localhost", "127.0.0.1", "::1"};
  const std::string full = base::LocalHostName(/*fallback=*/"");
  if (!full.empty()) {
    names.push_back(full);
    if (auto dot = full.find('.'); dot != std::string::npos) names.push_back(full.substr(0, dot));
  }
  return names;
}

bool IsLocalHost(const std::string& host, const std::vector<std::string>& local_names) {
  const std::string h = Lower(host);
  if (h.rfind("127.", 0) == 0) return true;
  for (const std::string& n : local_names) {
    if (h == Lower(n)) return true;
  }
  return false;
}

void JobFlags::Register(control::FlagSet* flags) {
  flag_set = flags;
  flags->Int("--num-proc,-np", &np, "number of ranks (default: the slots of -H/--hostfile)");
  flags->String("--hosts,-H", &hosts, "hosts and slots, HOST[:SLOTS],... e.g. a:4,b:4");
  flags->String("--hostfile", &hostfile, "file of 'HOST slots=N' lines (instead of -H)");
  flags->Repeated("-x", &env, "VAR[=VALUE] for every rank; without a value, copied from here");
  flags->String("--working-dir", &working_dir, "directory ranks run in (default: this one)");
  flags->String("--name", &name, "a name for the job, shown by list and status");
  flags->Double("--fusion-threshold-mb", &fusion_threshold_mb,
                "tensor fusion buffer in MiB (HVD_FUSION_THRESHOLD); 0 disables fusion");
  flags->Double("--cycle-time-ms", &cycle_time_ms,
                "milliseconds between negotiation cycles (HVD_CYCLE_TIME)");
  flags->String("--timeline-filename", &timeline_filename,
                "write a Chrome trace of every tensor here (HVD_TIMELINE)");
  flags->Double("--start-timeout", &start_timeout,
                "seconds every rank has to reach the rendezvous (hvd::Init) before the job fails "
                "naming the missing ones (default 30, applied once some rank has called "
                "hvd::Init; given: applied to every program; 0: no limit)");
  flags->Double("--stall-timeout", &stall_timeout,
                "fail the job once a rank has made no progress this many seconds; an elastic "
                "job removes the stalled worker instead (default: stalls are reported in status "
                "and output, never fatal)");
  flags->Double("--stall-check-time", &stall_check_time,
                "seconds without progress before a stall is reported (HVD_STALL_CHECK_TIME_SECONDS;"
                " default 60, or half of --stall-timeout) and the rank it ends at is asked for "
                "its stacks (a Python rank writes them to its stderr)");
  flags->Double("--kill-grace", &kill_grace,
                "seconds between SIGTERM and SIGKILL when the job's ranks are stopped (default: "
                "the launcher's, 5)");
  flags->Double("--queue-timeout", &queue_timeout,
                "seconds the job may wait for free slots before it fails saying what it waited "
                "for (default 0: as long as it takes)");
  flags->Int("--max-restarts,--max_restarts", &max_restarts,
             "run a failed job again, all ranks, up to N times (HVD_ATTEMPT tells the attempt)");
  flags->String("--nproc-per-node,--nproc_per_node", &nproc_per_node,
                "torchrun's: N ranks on each host (-np N x hosts; with -H each host gets N)");
  flags->String("--nnodes", &nnodes,
                "torchrun's: the number of hosts; more than 1 needs them named with -H/--hostfile");
  flags->StringList("--network-interface", &network_interfaces,
                    "NAME[,NAME] or CIDR the ranks talk over, in order of preference (default: "
                    "$HVD_IFACE, else whatever works between all the job's hosts); repeatable");
  flags->String("--run-as", &run_as,
                "run every rank as this user (a name known on each host); the agents must run as "
                "root, and root itself needs hvd-agent --allow-run-as-root");
  flags->Bool("--gpu-isolation", &gpu_isolation,
              "give each rank only the GPU of its slot (CUDA_VISIBLE_DEVICES=<that GPU>: it is "
              "device 0); default: every rank sees all of its host's GPUs and picks one, e.g. "
              "torch.cuda.set_device(hvd.local_rank()), as under horovodrun (docs/gpu.md)");
  binding.Register(flags);
  elastic.Register(flags);
  horovod.Register(flags);  // it adds horovodrun's spellings to the flags above
  RegisterTorchrunFlags(flags, &standalone);
}

std::vector<std::string> JobNotes(const JobFlags& f) {
  if (f.flag_set == nullptr) return {};
  std::vector<std::string> notes = HorovodNotes(f.horovod, *f.flag_set);
  for (std::string& n : TorchrunNotes(*f.flag_set, f.standalone)) notes.push_back(std::move(n));
  return notes;
}

Status ParseEnvFlags(const std::vector<std::string>& entries,
                     const std::function<const char*(const char*)>& getenv,
                     std::map<std::string, std::string>* env) {
  for (const std::string& e : entries) {
    const size_t eq = e.find('=');
    const std::string name = e.substr(0, eq);
    if (!ValidEnvName(name)) {
      return InvalidArgument("-x " + e + ": '" + name +
                             "' is not a variable name (letters, digits and '_', not starting "
                             "with a digit); use -x NAME=VALUE or -x NAME");
    }
    if (eq != std::string::npos) {
      (*env)[name] = e.substr(eq + 1);
      continue;
    }
    const char* value = getenv(name.c_str());
    if (value == nullptr) {
      return InvalidArgument("-x " + name + ": " + name +
                             " is not set in hvdrun's environment; set it, or pass -x " + name +
                             "=VALUE");
    }
    (*env)[name] = value;
  }
  return control::ValidateJobEnv(*env);
}

Status BuildJobSpec(const JobFlags& f, const std::vector<std::string>& program,
                    const HostEnvironment& host, ProgramCheck check, control::JobSpec* spec) {
  if (program.empty()) {
    return InvalidArgument("no program to run; usage: hvdrun -np N PROGRAM [ARGS...]");
  }
  // Its form only: whether the user exists is for each agent's host to say.
  const bool run_as_given = f.flag_set != nullptr && f.flag_set->Given("--run-as");
  if (run_as_given) HVD_RETURN_IF_ERROR(control::CheckUserName(f.run_as));
  std::vector<control::HostSlots> hosts;
  HVD_RETURN_IF_ERROR(ParseHosts(f, &hosts));
  int64_t np = f.np;
  bool np_given = f.flag_set != nullptr && f.flag_set->Given("--num-proc");
  const TorchrunShape shape{f.nproc_per_node, f.nnodes, f.standalone,
                            /*cluster=*/check == ProgramCheck::kWhenLocal};
  HVD_RETURN_IF_ERROR(ApplyTorchrunShape(shape, &hosts, &np, &np_given));
  const int total = control::TotalSlots(hosts);
  if (!np_given && f.elastic.Given(f.flag_set) && f.elastic.DefaultNp() > 0) {
    np = f.elastic.DefaultNp();
    np_given = true;
  }
  if (!np_given) {
    if (hosts.empty()) return InvalidArgument("-np N is required: how many ranks to start");
    np = total;
  }
  if (np < 1) return InvalidArgument("-np must be at least 1, not " + std::to_string(np));
  if (np > control::kMaxRanks) {
    return InvalidArgument("-np " + std::to_string(np) + " is more than hvd's limit of " +
                           std::to_string(control::kMaxRanks) + " ranks in a job");
  }
  if (!hosts.empty() && np > total) {
    return InvalidArgument("-np " + std::to_string(np) + " needs " + std::to_string(np) +
                           " slots but the hosts offer " + std::to_string(total) + " (" +
                           control::FormatHostList(hosts) + "); lower -np or add slots");
  }
  {
    // Before the program is looked up: a value missing from --blacklist-cooldown-range MIN MAX
    // took the program as MAX, and the user was told the program's first argument did not exist.
    control::JobSpec elastic;
    elastic.np = static_cast<int>(np);
    HVD_RETURN_IF_ERROR(f.elastic.Apply(f.flag_set, &elastic));
  }
  std::map<std::string, std::string> env;
  HVD_RETURN_IF_ERROR(ParseEnvFlags(f.env, host.getenv, &env));
  const std::map<std::string, std::string> x_env = env;  // -x alone: it wins over a config file
  HVD_RETURN_IF_ERROR(AddKnobs(f, x_env, &env));
  if (f.flag_set != nullptr) {
    HVD_RETURN_IF_ERROR(AddHorovodEnv(f.horovod, *f.flag_set, x_env, &env));
  }
  if (f.flag_set != nullptr) {
    // Every rank here (local run mode): the CPU list is checked against this host's CPUs too.
    const bool all_here = check == ProgramCheck::kAlways && hosts.empty();
    const int local_ranks =
        hosts.empty() ? (all_here ? static_cast<int>(np) : 0) : MaxLocalRanks(hosts, np);
    HVD_RETURN_IF_ERROR(AddBindingEnv(f.binding, *f.flag_set, local_ranks, all_here, &env));
  }
  // The launcher gives every rank these unless the job does (control/worker_env.h); a value the
  // user set here is theirs, in cluster mode too, where ranks do not inherit hvdrun's environment.
  for (const auto& [name, value] : control::WorkerDefaults()) {
    const char* mine = host.getenv(name.c_str());
    if (mine != nullptr && !env.count(name)) env[name] = mine;
  }

  std::string wd = f.working_dir.empty() ? host.cwd : f.working_dir;
  if (wd.empty()) return InvalidArgument("cannot tell the current directory; pass --working-dir");
  if (wd[0] != '/') wd = JoinPath(host.cwd, wd);

  bool local = true;
  for (const control::HostSlots& h : hosts) local = local && IsLocalHost(h.host, host.local_names);
  const bool do_check = check == ProgramCheck::kAlways || local;
  if (do_check) {
    struct stat st;
    if (stat(wd.c_str(), &st) != 0) {
      return InvalidArgument("--working-dir " + wd + ": " + std::strerror(errno));
    }
    if (!S_ISDIR(st.st_mode)) {
      return InvalidArgument("--working-dir " + wd + ": " + std::strerror(ENOTDIR));
    }
    // Rank 0 writes the timeline, here when every rank runs here (cli/timeline_path.h).
    for (const char* var : {"HVD_TIMELINE", "HOROVOD_TIMELINE"}) {
      if (!env.count(var)) continue;
      const bool flag = f.flag_set != nullptr && f.flag_set->Given("--timeline-filename") &&
                        std::string(var) == "HVD_TIMELINE" && !x_env.count(var);
      const std::string given_as =
          flag ? f.flag_set->GivenAs("--timeline-filename") : std::string("-x ") + var + "=";
      HVD_RETURN_IF_ERROR(CheckTimelinePath(given_as, env.at(var), wd));
    }
  }
  const char* path_var = host.getenv("PATH");
  std::string argv0;
  Status resolved = ResolveProgram(program[0], wd,
                                   path_var != nullptr ? path_var : "/usr/local/bin:/usr/bin:/bin",
                                   do_check, &argv0);
  const std::string& p0 = program[0];
  if (!resolved.ok() && p0.size() > 3 && p0.compare(p0.size() - 3, 3, ".py") == 0) {
    // torchrun runs a .py file through Python itself; hvdrun runs programs, as mpirun does.
    resolved = Status(resolved.code(), resolved.message() + "; to run a Python script, name " +
                                           "the interpreter: hvdrun ... python3 " + p0);
  }
  HVD_RETURN_IF_ERROR(resolved);
  *spec = control::JobSpec();
  spec->argv.push_back(argv0);
  for (size_t i = 1; i < program.size(); ++i) spec->argv.push_back(program[i]);
  spec->np = static_cast<int>(np);
  for (const control::HostSlots& h : hosts) spec->hosts.push_back({h.host, h.slots});
  spec->env.insert(env.begin(), env.end());
  spec->working_dir = wd;
  spec->name = f.name;
  HVD_RETURN_IF_ERROR(SetLimits(f, spec));
  HVD_RETURN_IF_ERROR(NetworkInterfacesFlag(f, host, spec));
  if (run_as_given) spec->run_as = f.run_as;
  spec->gpu_isolation = f.gpu_isolation;
  HVD_RETURN_IF_ERROR(f.elastic.Apply(f.flag_set, spec));
  // The limits the launcher enforces on every spec (argv and -x sizes, host entries...): one
  // validator for both ends (control/spec_limits.h).
  return control::ValidateJobSpec(*spec);
}

Status EmbeddedAgentFor(const control::JobSpec& spec, const std::vector<std::string>& local_names,
                        const std::string& hosts_from, std::string* agent_host, int* slots) {
  if (spec.hosts.empty()) {
    agent_host->clear();
    *slots = std::max(spec.np, spec.max_np);  // an elastic job grows to --max-np here
    return Status::OK();
  }
  const control::HostRequest* mine = nullptr;
  for (const control::HostRequest& h : spec.hosts) {
    if (!IsLocalHost(h.host, local_names)) {
      return InvalidArgument(hosts_from + " names " + h.host +
                             ", but without --launcher every rank runs on this host; start "
                             "hvd-launcherd and an hvd-agent per host and pass --launcher "
                             "HOST:PORT (see docs/deployment.md)");
    }
    if (mine != nullptr) {
      return InvalidArgument(hosts_from + " names this host twice (" + mine->host + " and " +
                             h.host + "); list it once with all its slots");
    }
    mine = &h;
  }
  *agent_host = mine->host;
  // An elastic job may grow here up to --max-np (a discovery script may raise the count later).
  *slots = std::max(mine->slots, spec.max_np);
  return Status::OK();
}

}  // namespace hvd::cli
