#include "agent/process_spawn.h"

#include <poll.h>

#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "agent/worker_wrapper.h"
#include "control/cpu_binding.h"

extern char** environ;

namespace hvd::agent {
namespace {

// What the child reports through the exec-error pipe before it _exits.
struct ChildFailure {
  int stage;  // kStage*
  int err;    // errno
};
constexpr int kStageChdir = 1;
constexpr int kStageExec = 2;
constexpr int kStageSetup = 3;     // stdin, descriptors: the system is in trouble
constexpr int kStageWrapper = 4;   // the wrapper binary itself would not exec
constexpr int kStageAffinity = 5;  // sched_setaffinity refused the planned CPUs

// Everything below runs in the child between fork and exec: only async-signal-safe calls, no
// allocation (another thread of the agent may have held the malloc lock at fork time).
[[noreturn]] void ChildFail(int fd, int stage, int err) {
  ChildFailure f{stage, err};
  ssize_t unused = write(fd, &f, sizeof f);
  (void)unused;
  _exit(127);
}

// dup2 that also works when `from` already is `to` (dup2 would then keep close-on-exec set).
bool MoveFd(int from, int to) {
  if (from == to) return fcntl(to, F_SETFD, 0) == 0;
  return dup2(from, to) == to;
}

void CloseFrom(unsigned first, unsigned last) {
  if (first > last) return;
  if (syscall(SYS_close_range, first, last, 0u) == 0) return;
  // Kernels before 5.9: close one by one up to a bound.
  struct rlimit rl;
  unsigned limit = 65536;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < limit) limit = rl.rlim_cur;
  for (unsigned fd = first; fd <= last && fd < limit; ++fd) close(static_cast<int>(fd));
}

// Moves each descriptor to its fixed number in the wrapper (worker_wrapper.h). Every source is
// at 10 or above (see Spawn), so no move overwrites a source not yet moved.
bool PlaceFd(int from, int to, bool cloexec) {
  if (dup2(from, to) != to) return false;
  return !cloexec || fcntl(to, F_SETFD, FD_CLOEXEC) == 0;
}

[[noreturn]] void ChildMain(pid_t parent, int report_fd, int in_r, int out_w, int err_w,
                            int status_w, int lifeline_r, int secret_fd, const cpu_set_t* cpus,
                            const char* working_dir, const char* wrapper, char* const* argv,
                            char* const* envp) {
  // Dispositions first, then the mask (all blocked since before fork): the agent blocks
  // SIGINT/SIGTERM for sigwait() and gRPC may ignore SIGPIPE; either would be inherited across
  // exec and make the worker deaf to SIGTERM or blind to broken pipes.
  struct sigaction dfl;
  std::memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) sigaction(sig, &dfl, nullptr);  // fails harmlessly on some
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);

  // Its own group, so a terminal's Ctrl-C to the agent's group does not reach it; PDEATHSIG so it
  // hears of the agent's death (the wrapper turns it into SIGHUP and cleans up).
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  // The agent may have died before prctl took effect; then nothing would ever kill us.
  if (getppid() != parent) _exit(127);

  // Before the moves below: the wrapper and the worker inherit it.
  if (cpus != nullptr && sched_setaffinity(0, sizeof *cpus, cpus) != 0) {
    ChildFail(report_fd, kStageAffinity, errno);
  }
  int in_fd = in_r >= 0 ? in_r : open("/dev/null", O_RDONLY);
  if (in_fd < 0) ChildFail(report_fd, kStageSetup, errno);
  if (!MoveFd(in_fd, STDIN_FILENO) || !MoveFd(out_w, STDOUT_FILENO) ||
      !MoveFd(err_w, STDERR_FILENO) || !PlaceFd(status_w, kWrapperStatusFd, false) ||
      !PlaceFd(lifeline_r, kWrapperLifelineFd, false) || !PlaceFd(report_fd, 5, true) ||
      (secret_fd >= 0 && !PlaceFd(secret_fd, kJobSecretFd, false))) {
    ChildFail(report_fd, kStageSetup, errno);
  }
  report_fd = 5;
  // Nothing of the agent's (gRPC sockets, other workers' pipes) leaks into the wrapper; the report
  // pipe stays open until exec closes it (close-on-exec). The secret stays open through both
  // execs (the wrapper's and the worker's).
  CloseFrom(secret_fd >= 0 ? kJobSecretFd + 1 : kJobSecretFd, ~0U);

  if (working_dir[0] != '\0' && chdir(working_dir) != 0) {
    ChildFail(report_fd, kStageChdir, errno);
  }
  execve(wrapper, argv, envp);
  ChildFail(report_fd, kStageWrapper, errno);
}

std::vector<char*> Pointers(std::vector<std::string>& strings) {
  std::vector<char*> p;
  p.reserve(strings.size() + 1);
  for (std::string& s : strings) p.push_back(s.data());
  p.push_back(nullptr);
  return p;
}

// What to do about execve's `err` for `program` (as the worker gave it, relative to `dir`).
std::string ExecHint(int err, const std::string& program, const std::string& dir) {
  switch (err) {
    case EACCES: {
      // execve says EACCES for a directory too; "chmod +x" would send the user the wrong way.
      struct stat st;
      const std::string path =
          program.find('/') == std::string::npos || program[0] == '/' || dir.empty()
              ? program
              : dir + "/" + program;
      if (program.find('/') != std::string::npos && stat(path.c_str(), &st) == 0 &&
          S_ISDIR(st.st_mode)) {
        return " (it is a directory: name the program in it)";
      }
      return " (is it executable? chmod +x, and check the directories' permissions)";
    }
    case ENOEXEC:
      return " (not a binary this host runs; a script needs a #! line)";
    default:
      return "";
  }
}

void CloseAll(std::initializer_list<int> fds) {
  for (int fd : fds) {
    if (fd >= 0) close(fd);
  }
}

}  // namespace

std::vector<std::string> MergeEnvironment(const char* const* base,
                                          const std::map<std::string, std::string>& overrides) {
  std::map<std::string, std::string> merged;
  for (const char* const* e = base; e != nullptr && *e != nullptr; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (eq == nullptr || eq == *e) continue;  // malformed entries are not passed on
    merged.emplace(std::string(*e, eq - *e), std::string(eq + 1));
  }
  for (const auto& [k, v] : overrides) merged[k] = v;
  std::vector<std::string> out;
  out.reserve(merged.size());
  for (const auto& [k, v] : merged) out.push_back(k + "=" + v);
  return out;
}

namespace {

// A pipe whose both ends are numbered 10 or above (see PlaceFd), close-on-exec.
bool HighPipe(int fds[2]) {
  int raw[2];
  if (pipe2(raw, O_CLOEXEC) != 0) return false;
  for (int i = 0; i < 2; ++i) {
    fds[i] = fcntl(raw[i], F_DUPFD_CLOEXEC, 10);
    close(raw[i]);
  }
  if (fds[0] >= 0 && fds[1] >= 0) return true;
  CloseAll({fds[0], fds[1]});
  fds[0] = fds[1] = -1;
  return false;
}

// Reads one record, waiting at most `timeout_ms`; false on EOF, error or timeout.
bool ReadReport(int fd, WrapperReport* r, int timeout_ms) {
  pollfd p{fd, POLLIN, 0};
  int n;
  do {
    n = poll(&p, 1, timeout_ms);
  } while (n < 0 && errno == EINTR);
  if (n <= 0) return false;
  ssize_t got;
  do {
    got = read(fd, r, sizeof *r);
  } while (got < 0 && errno == EINTR);
  return got == static_cast<ssize_t>(sizeof *r);
}

void Reap(pid_t pid) {
  while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
  }
}

// The value of NAME in a "K=V" environment; "" when unset.
std::string EnvValue(const std::vector<std::string>& env, const std::string& name) {
  const std::string prefix = name + "=";
  for (const std::string& e : env) {
    if (e.rfind(prefix, 0) == 0) return e.substr(prefix.size());
  }
  return "";
}

// The worker's CPUs from its environment's binding policy (control/cpu_binding.h).
Status PlanWorkerBinding(const std::vector<std::string>& env, control::BindingPlan* plan) {
  *plan = control::BindingPlan();
  control::BindingPolicy policy;
  HVD_RETURN_IF_ERROR_CTX(control::PolicyFromValues(EnvValue(env, control::kBindToEnv),
                                                    EnvValue(env, control::kCpuListEnv), &policy),
                          "CPU binding");
  if (policy.none()) return Status::OK();
  const int local_rank = std::atoi(EnvValue(env, "HVD_LOCAL_RANK").c_str());
  const std::string size = EnvValue(env, "HVD_LOCAL_SIZE");
  const int local_size = size.empty() ? 1 : std::atoi(size.c_str());
  // Read once: CPUs do not come and go under a running agent often enough to matter.
  static const std::vector<control::CpuInfo>* topology = [] {
    auto* cpus = new std::vector<control::CpuInfo>();
    (void)control::ReadCpuTopology("/sys/devices/system/cpu", cpus);  // empty: flat CPUs
    return cpus;
  }();
  std::vector<int> allowed;
  (void)control::AllowedCpus(&allowed);  // empty: every CPU of the topology
  Status s = control::PlanBinding(policy, *topology, allowed, local_rank, local_size, plan);
  if (!s.ok()) return FailedPrecondition(s.message());
  return Status::OK();
}

// Takes HVD_JOB_SECRET out of `env` into a sealed memfd numbered 10 or above (close-on-exec; the
// child places it at kJobSecretFd) and names it in HVD_JOB_SECRET_FD. *fd stays -1 when the
// environment has no secret.
Status MoveSecretToFd(std::vector<std::string>* env, int* fd) {
  *fd = -1;
  const std::string prefix = "HVD_JOB_SECRET=";
  std::string secret;
  for (auto it = env->begin(); it != env->end();) {
    if (it->rfind(prefix, 0) == 0 || it->rfind("HVD_JOB_SECRET_FD=", 0) == 0) {
      if (it->rfind(prefix, 0) == 0) secret = it->substr(prefix.size());
      it = env->erase(it);
    } else {
      ++it;
    }
  }
  if (secret.empty()) return Status::OK();
  const int raw = memfd_create("hvd-job-secret", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (raw < 0) {
    return Unavailable(std::string("memfd_create for the job secret: ") + std::strerror(errno));
  }
  size_t done = 0;
  while (done < secret.size()) {
    const ssize_t n = write(raw, secret.data() + done, secret.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int e = errno;
      close(raw);
      return Unavailable(std::string("writing the job secret to a memfd: ") + std::strerror(e));
    }
    done += static_cast<size_t>(n);
  }
  // Sealed: the worker (or anything it runs) can read the secret but not change it for others.
  (void)fcntl(raw, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL);
  *fd = fcntl(raw, F_DUPFD_CLOEXEC, 10);
  const int e = errno;
  close(raw);
  if (*fd < 0) return Unavailable(std::string("dup of the job secret memfd: ") + std::strerror(e));
  env->push_back("HVD_JOB_SECRET_FD=" + std::to_string(kJobSecretFd));
  return Status::OK();
}

// The wrapper reports the worker's exec within milliseconds; this bounds a wedged one.
constexpr int kWrapperStartTimeoutMs = 30000;

}  // namespace

Status SpawnProcess(const SpawnRequest& request, SpawnedProcess* out) {
  if (request.argv.empty() || request.argv[0].empty()) {
    return InvalidArgument("cannot start a worker with an empty command line");
  }
  if (request.wrapper.empty()) return InvalidArgument("no worker wrapper binary given");
  // Prepare everything the child needs now: it may not allocate after fork.
  std::vector<std::string> argv_strings =
      WrapperArgv(request.cgroup_procs, request.argv, request.run_as);
  std::vector<char*> argv = Pointers(argv_strings);
  std::vector<std::string> env_strings = MergeEnvironment(environ, request.env);
  int secret_fd = -1;
  HVD_RETURN_IF_ERROR(MoveSecretToFd(&env_strings, &secret_fd));
  std::vector<char*> envp = Pointers(env_strings);
  std::string path_var = "/bin:/usr/bin";  // execvp's default when PATH is unset
  for (const std::string& e : env_strings) {
    if (e.rfind("PATH=", 0) == 0) path_var = e.substr(5);
  }

  control::BindingPlan binding;
  Status planned = PlanWorkerBinding(env_strings, &binding);
  if (!planned.ok()) {
    if (secret_fd >= 0) close(secret_fd);
    return planned;
  }
  cpu_set_t cpu_set;
  CPU_ZERO(&cpu_set);
  for (int cpu : binding.cpus) {
    if (cpu < CPU_SETSIZE) CPU_SET(cpu, &cpu_set);
  }

  int out_pipe[2] = {-1, -1}, err_pipe[2] = {-1, -1}, report[2] = {-1, -1};
  int status[2] = {-1, -1}, lifeline[2] = {-1, -1};
  const auto close_pipes = [&] {
    CloseAll({out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1], report[0], report[1], status[0],
              status[1], lifeline[0], lifeline[1], secret_fd});
  };
  if (!HighPipe(out_pipe) || !HighPipe(err_pipe) || !HighPipe(report) || !HighPipe(status) ||
      !HighPipe(lifeline)) {
    const int e = errno;
    close_pipes();
    return Unavailable(std::string("cannot create pipes for a worker: ") + std::strerror(e) +
                       " (raise the agent's open-file limit)");
  }
  const pid_t parent = getpid();
  // No signal handler of the embedding process (hvdrun's writes to its signal pipe) may run in the
  // child before ChildMain resets the dispositions: block everything across fork, as posix_spawn
  // does; the child then unblocks everything.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  const pid_t pid = fork();
  if (pid != 0) pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (pid < 0) {
    const int e = errno;
    close_pipes();
    return Unavailable(std::string("fork: ") + std::strerror(e));
  }
  if (pid == 0) {
    ChildMain(parent, report[1], request.stdin_fd, out_pipe[1], err_pipe[1], status[1], lifeline[0],
              secret_fd, binding.cpus.empty() ? nullptr : &cpu_set, request.working_dir.c_str(),
              request.wrapper.c_str(), argv.data(), envp.data());
  }
  // Also set the group from this side: kill(-pid) must reach the group even if the child has not
  // run yet (harmless EACCES once it has exec'd).
  setpgid(pid, pid);
  CloseAll({out_pipe[1], err_pipe[1], report[1], status[1], lifeline[0], secret_fd});
  const auto fail = [&](Status s) {
    CloseAll({out_pipe[0], err_pipe[0], status[0], lifeline[1]});
    Reap(pid);
    return s;
  };

  ChildFailure failure{};
  ssize_t n;
  do {
    n = read(report[0], &failure, sizeof failure);
  } while (n < 0 && errno == EINTR);
  close(report[0]);
  if (n != 0) {  // not closed by a successful exec of the wrapper
    if (n != static_cast<ssize_t>(sizeof failure)) {
      return fail(Internal("worker " + request.argv[0] +
                           " died before exec (short report from the child)"));
    }
    const std::string text = std::strerror(failure.err);
    switch (failure.stage) {
      case kStageChdir:
        return fail(FailedPrecondition("chdir " + request.working_dir + ": " + text +
                                       " (the job's working directory must exist on this host)"));
      case kStageAffinity:
        return fail(FailedPrecondition("binding " + request.argv[0] + " to CPUs " +
                                       control::FormatCpuSet(binding.cpus) + ": " + text));
      case kStageWrapper:
        return fail(Internal("exec of the worker wrapper " + request.wrapper + ": " + text));
      default:
        return fail(Unavailable("setting up worker " + request.argv[0] + ": " + text));
    }
  }
  WrapperReport r;
  if (!ReadReport(status[0], &r, kWrapperStartTimeoutMs) ||
      (r.kind != WrapperReport::kStarted && r.kind != WrapperReport::kExecFailed)) {
    kill(-pid, SIGKILL);
    return fail(Internal("the worker wrapper (" + request.wrapper +
                         ") did not report the start of " + request.argv[0]));
  }
  if (r.kind == WrapperReport::kExecFailed && r.b != kWrapperStageExec) {
    return fail(
        FailedPrecondition(RunAsFailureText(r.b, r.a, request.run_as, request.working_dir)));
  }
  if (r.kind == WrapperReport::kExecFailed) {
    std::string msg = "exec " + request.argv[0] + ": " + std::strerror(r.a) +
                      ExecHint(r.a, request.argv[0], request.working_dir);
    const std::vector<std::string> candidates = ExecCandidates(request.argv[0], path_var);
    if (candidates.size() > 1 || candidates[0] != request.argv[0]) {
      msg += " (searched PATH=" + path_var + ")";
    } else if (request.argv[0][0] != '/' && !request.working_dir.empty()) {
      msg += " (relative to " + request.working_dir + ")";
    }
    return fail(FailedPrecondition(msg));
  }
  out->pid = pid;
  out->worker_pid = r.a;
  out->stdout_fd = out_pipe[0];
  out->stderr_fd = err_pipe[0];
  out->status_fd = status[0];
  out->lifeline_fd = lifeline[1];
  if (!binding.cpus.empty()) out->cpus = control::FormatCpuSet(binding.cpus);
  out->binding_note = binding.note;
  return Status::OK();
}

}  // namespace hvd::agent
