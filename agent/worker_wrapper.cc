#include "agent/worker_wrapper.h"

#include <fcntl.h>
#include <grp.h>
#include <libgen.h>
#include <limits.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "agent/cgroup.h"
#include "agent/proc_fs.h"
#include "base/clock.h"
#include "base/path_search.h"

extern char** environ;

namespace hvd::agent {
namespace {

using Clock = std::chrono::steady_clock;

// How long the wrapper keeps killing re-parented descendants before it gives up and exits.
constexpr auto kDescendantsDeadline = std::chrono::seconds(2);

[[noreturn]] void Die(const std::string& message) {
  std::fprintf(stderr, "hvd worker wrapper: %s\n", message.c_str());
  _exit(127);
}

void Report(WrapperReport::Kind kind, int a, int b, int64_t time_ms = 0) {
  WrapperReport r;
  r.kind = kind;
  r.a = a;
  r.b = b;
  r.time_ms = time_ms;
  ssize_t n;
  do {
    n = write(kWrapperStatusFd, &r, sizeof r);
  } while (n < 0 && errno == EINTR);
  // EPIPE: the agent is gone; the lifeline says so too.
}

// Removes the rank's cgroup and, when they have become empty, the job's and (levels 3: the agent
// is gone) the agent's.
void RemoveCgroupDirs(const std::string& procs_file, int levels) {
  if (procs_file.empty()) return;
  std::string dir = procs_file.substr(0, procs_file.rfind('/'));
  for (int i = 0; i < levels && !dir.empty(); ++i) {
    if (rmdir(dir.c_str()) != 0) break;  // not empty yet (another rank), or busy
    dir = dir.substr(0, dir.rfind('/'));
  }
}

// Kills every re-parented descendant until none is left (each death may re-parent its own
// children to us), reaping as it goes. Bounded.
void KillDescendants() {
  const auto deadline = Clock::now() + kDescendantsDeadline;
  while (Clock::now() < deadline) {
    while (waitpid(-1, nullptr, WNOHANG) > 0) {
    }
    std::vector<pid_t> kids = ChildrenOf(getpid());
    if (kids.empty()) return;
    for (pid_t k : kids) kill(k, SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

// What the worker's child side sends back through its exec-error pipe.
struct ChildError {
  int err = 0;
  int stage = kWrapperStageExec;
};

class Wrapper {
 public:
  Wrapper(std::string cgroup_procs, std::string run_as, std::vector<std::string> program)
      : cgroup_procs_(std::move(cgroup_procs)),
        run_as_(std::move(run_as)),
        program_(std::move(program)) {}

  [[noreturn]] void Run() {
    Setup();
    Spawn();
    Supervise();
  }

 private:
  void Setup() {
    for (int fd : {kWrapperStatusFd, kWrapperLifelineFd}) {
      if (fcntl(fd, F_SETFD, FD_CLOEXEC) != 0) {
        Die("descriptor " + std::to_string(fd) + " is not open (only hvd-agent starts this)");
      }
    }
    prctl(PR_SET_NAME, "hvd-wrapper");
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    // The agent's side set SIGKILL; the wrapper needs to hear it and clean up instead.
    prctl(PR_SET_PDEATHSIG, SIGHUP);
    sigset_t set;
    sigemptyset(&set);
    for (int sig : {SIGCHLD, SIGHUP, SIGTERM, SIGINT, SIGPIPE}) sigaddset(&set, sig);
    sigprocmask(SIG_BLOCK, &set, nullptr);
    signal_fd_ = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
    if (signal_fd_ < 0) Die(std::string("signalfd: ") + std::strerror(errno));
  }

  void Spawn() {
    std::vector<std::string> argv_strings = program_;
    std::vector<char*> argv;
    for (std::string& s : argv_strings) argv.push_back(s.data());
    argv.push_back(nullptr);
    const char* path = std::getenv("PATH");
    std::vector<std::string> candidate_strings =
        ExecCandidates(program_[0], path != nullptr ? path : "/bin:/usr/bin");
    std::vector<const char*> candidates;
    for (const std::string& c : candidate_strings) candidates.push_back(c.c_str());
    candidates.push_back(nullptr);

    if (!run_as_.empty()) LookUpUser();

    int err_pipe[2];
    if (pipe2(err_pipe, O_CLOEXEC) != 0) Die(std::string("pipe: ") + std::strerror(errno));
    const pid_t self = getpid();
    worker_ = fork();
    if (worker_ < 0) {
      Report(WrapperReport::kExecFailed, errno, 0);
      _exit(127);
    }
    if (worker_ == 0) {
      close(err_pipe[0]);
      sigset_t none;
      sigemptyset(&none);
      sigprocmask(SIG_SETMASK, &none, nullptr);
      setpgid(0, 0);
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != self) _exit(127);
      if (!cgroup_procs_.empty()) {
        const int fd = open(cgroup_procs_.c_str(), O_WRONLY | O_CLOEXEC);
        if (fd >= 0) {
          ssize_t unused = write(fd, "0", 1);
          (void)unused;
          close(fd);
        }
      }
      ChildError failure;
      // After the cgroup (joining it needs root), before exec. The wrapper is single-threaded,
      // so the child may allocate and use NSS (initgroups) here.
      if (!run_as_.empty()) failure = SwitchUser(self);
      if (failure.err == 0) failure.err = ExecFirst(candidates.data(), argv.data(), environ);
      ssize_t unused = write(err_pipe[1], &failure, sizeof failure);
      (void)unused;
      _exit(127);
    }
    setpgid(worker_, worker_);
    close(err_pipe[1]);
    // The worker's stdin may be the agent's pipe (hvdrun --stdin): the wrapper must not hold its
    // read end open, or the agent would keep writing into it after the worker closed it.
    const int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (null_fd >= 0) {
      dup2(null_fd, STDIN_FILENO);
      close(null_fd);
    }
    ChildError failure;
    ssize_t n;
    do {
      n = read(err_pipe[0], &failure, sizeof failure);
    } while (n < 0 && errno == EINTR);
    close(err_pipe[0]);
    if (n > 0) {
      while (waitpid(worker_, nullptr, 0) < 0 && errno == EINTR) {
      }
      Report(WrapperReport::kExecFailed, failure.err, failure.stage);
      RemoveCgroupDirs(cgroup_procs_, 2);
      _exit(127);
    }
    Report(WrapperReport::kStarted, worker_, 0);
  }

  // --run-as, before the fork: the user's ids and home, and the working directory to check as
  // that user. The agent checked the user already (CheckRunAs); this covers a user removed since.
  void LookUpUser() {
    errno = 0;
    const passwd* pw = getpwnam(run_as_.c_str());
    if (pw == nullptr) {
      Report(WrapperReport::kExecFailed, errno != 0 ? errno : ENOENT, kWrapperStageNoUser);
      RemoveCgroupDirs(cgroup_procs_, 2);
      _exit(127);
    }
    uid_ = pw->pw_uid;
    gid_ = pw->pw_gid;
    home_ = pw->pw_dir != nullptr ? pw->pw_dir : "/";
    char cwd[PATH_MAX];
    if (getcwd(cwd, sizeof cwd) != nullptr) cwd_ = cwd;
  }

  // In the worker's child: groups, gid, uid, in that order (setuid first would leave no right to
  // change the others), each checked, then checked again from the outside: the real and effective
  // ids are the user's and, for any user but root, root's cannot be taken back.
  ChildError SwitchUser(pid_t wrapper) {
    ChildError f;
    f.stage = kWrapperStageSwitchUser;
    if (initgroups(run_as_.c_str(), gid_) != 0 || setgid(gid_) != 0 || setuid(uid_) != 0) {
      f.err = errno;
      return f;
    }
    if (getuid() != uid_ || geteuid() != uid_ || getgid() != gid_ || getegid() != gid_ ||
        (uid_ != 0 && setuid(0) == 0)) {
      f.err = EPERM;
      return f;
    }
    // A change of credentials clears the parent-death signal: set it again, and make sure the
    // wrapper did not die in between.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != wrapper) _exit(127);
    setenv("HOME", home_.c_str(), 1);
    setenv("USER", run_as_.c_str(), 1);
    setenv("LOGNAME", run_as_.c_str(), 1);
    // The descriptor of the working directory was opened as root: enter it again by its path,
    // as the user, so one the user cannot reach fails now with a clear message instead of the
    // program failing on its first relative path.
    if (!cwd_.empty() && chdir(cwd_.c_str()) != 0) {
      f.stage = kWrapperStageUserChdir;
      f.err = errno;
      return f;
    }
    f.err = 0;
    return f;
  }

  // Whether the worker has exited, without reaping it: until it is reaped its pid, and so its
  // group id, cannot be reused, which keeps kill(-worker_) aimed at its group.
  bool WorkerExited() {
    siginfo_t info{};
    if (waitid(P_PID, static_cast<id_t>(worker_), &info, WEXITED | WNOHANG | WNOWAIT) != 0) {
      return true;
    }
    return info.si_pid == worker_;
  }

  [[noreturn]] void Supervise() {
    while (true) {
      pollfd fds[2] = {{kWrapperLifelineFd, POLLIN, 0}, {signal_fd_, POLLIN, 0}};
      // Re-parented orphans exit too; the timeout also covers a SIGCHLD merged with another.
      poll(fds, 2, 1000);
      bool agent_gone = fds[0].revents != 0;
      signalfd_siginfo si;
      while (read(signal_fd_, &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
        if (si.ssi_signo == SIGHUP) agent_gone = true;
        if (si.ssi_signo == SIGTERM || si.ssi_signo == SIGINT) {
          kill(-worker_, SIGTERM);
          kill(-worker_, SIGCONT);
        }
      }
      if (agent_gone) {
        KillAll(3);
        _exit(137);
      }
      if (WorkerExited()) {
        // When it ended, before the cleanup: failures of several ranks are ordered by it.
        const int64_t ended_ms = base::WallMs();
        const int status = KillAll(2);
        if (WIFSIGNALED(status)) {
          Report(WrapperReport::kExited, 0, WTERMSIG(status), ended_ms);
          _exit(128 + WTERMSIG(status));
        }
        Report(WrapperReport::kExited, WEXITSTATUS(status), 0, ended_ms);
        _exit(WEXITSTATUS(status));
      }
      // Reap orphans that exited, but never the worker (WorkerExited must see it first).
      siginfo_t info{};
      while (waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid != 0 &&
             info.si_pid != worker_) {
        waitpid(info.si_pid, nullptr, 0);
        info = {};
      }
    }
  }

  // Everything the worker left, then the worker's wait status. `levels` of cgroup directories are
  // removed once empty (RemoveCgroupDirs).
  int KillAll(int levels) {
    kill(-worker_, SIGKILL);
    kill(worker_, SIGKILL);
    if (!cgroup_procs_.empty()) KillCgroupNow(cgroup_procs_.substr(0, cgroup_procs_.rfind('/')));
    int status = 0;
    while (waitpid(worker_, &status, 0) < 0 && errno == EINTR) {
    }
    KillDescendants();
    RemoveCgroupDirs(cgroup_procs_, levels);
    return status;
  }

  const std::string cgroup_procs_;
  const std::string run_as_;  // empty: the worker keeps the wrapper's user
  const std::vector<std::string> program_;
  uid_t uid_ = 0;  // run_as_'s, from LookUpUser
  gid_t gid_ = 0;
  std::string home_;
  std::string cwd_;
  int signal_fd_ = -1;
  pid_t worker_ = -1;
};

}  // namespace

std::vector<std::string> ExecCandidates(const std::string& argv0, const std::string& path_var) {
  if (argv0.find('/') != std::string::npos) return {argv0};
  return base::PathCandidates(argv0, path_var);
}

int ExecFirst(const char* const* candidates, char* const* argv, char* const* envp) {
  bool saw_eacces = false;
  int err = ENOENT;
  for (const char* const* c = candidates; *c != nullptr; ++c) {
    execve(*c, argv, envp);
    err = errno;
    if (err == EACCES) {
      saw_eacces = true;
    } else if (err != ENOENT && err != ENOTDIR) {
      break;
    }
  }
  if (saw_eacces && (err == ENOENT || err == ENOTDIR)) err = EACCES;
  return err;
}

std::vector<std::string> WrapperArgv(const std::string& cgroup_procs_file,
                                     const std::vector<std::string>& program,
                                     const std::string& run_as) {
  // argv[0] is what ps shows; the binary is exec'd by path (often /proc/self/exe).
  std::vector<std::string> argv = {"hvd-wrapper", kWorkerWrapperFlag, cgroup_procs_file};
  if (!run_as.empty()) {
    argv.push_back("--run-as");
    argv.push_back(run_as);
  }
  argv.push_back("--");
  argv.insert(argv.end(), program.begin(), program.end());
  return argv;
}

void RunWorkerWrapperIfAsked(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], kWorkerWrapperFlag) != 0) return;
  int sep = 3;
  std::string run_as;
  if (argc > 4 && std::strcmp(argv[3], "--run-as") == 0) {
    run_as = argv[4];
    sep = 5;
  }
  if (argc < sep + 2 || std::strcmp(argv[sep], "--") != 0 || (sep == 5 && run_as.empty())) {
    Die(std::string("usage: <exe> ") + kWorkerWrapperFlag +
        " CGROUP_PROCS [--run-as USER] -- PROGRAM [ARGS...]");
  }
  Wrapper(argv[2], std::move(run_as), std::vector<std::string>(argv + sep + 1, argv + argc)).Run();
}

Status CheckRunAs(const std::string& user, bool allow_root, const std::string& host) {
  const uid_t self = geteuid();
  if (self != 0) {
    return FailedPrecondition("hvd-agent runs as uid " + std::to_string(self) +
                              ": --run-as needs an agent started as root (the job asks for user '" +
                              user + "' on " + host + ")");
  }
  passwd pw{};
  passwd* found = nullptr;
  std::vector<char> buf(16384);
  int rc;
  while ((rc = getpwnam_r(user.c_str(), &pw, buf.data(), buf.size(), &found)) == ERANGE &&
         buf.size() < (1u << 20)) {
    buf.resize(buf.size() * 2);
  }
  if (found == nullptr) {
    // getpwnam_r reports "no such user" as 0 or as one of these, depending on the NSS module.
    if (rc == 0 || rc == ENOENT || rc == ESRCH || rc == EBADF || rc == EPERM) {
      return FailedPrecondition("--run-as " + user + ": no user '" + user + "' on host " + host +
                                "; create it there (every host of the job needs it) or run the "
                                "job as a user that exists");
    }
    return Unavailable("--run-as " + user + ": looking the user up on host " + host + ": " +
                       std::strerror(rc));
  }
  if (pw.pw_uid == 0 && !allow_root) {
    return FailedPrecondition("--run-as " + user + " is root (uid 0): hvd-agent on " + host +
                              " runs ranks as root only when started with --allow-run-as-root");
  }
  return Status::OK();
}

std::string RunAsFailureText(int32_t stage, int err, const std::string& user,
                             const std::string& working_dir) {
  const std::string text = std::strerror(err);
  switch (stage) {
    case kWrapperStageNoUser:
      return "--run-as " + user + ": no such user on this host (" + text + ")";
    case kWrapperStageSwitchUser:
      return "--run-as " + user + ": switching the rank to the user failed: " + text;
    case kWrapperStageUserChdir:
      return "--run-as " + user + ": the working directory " +
             (working_dir.empty() ? std::string("(the agent's)") : working_dir) +
             " is not reachable by user " + user + ": " + text +
             "; give --working-dir a directory that user can enter";
    default:
      return "starting the rank: " + text;
  }
}

}  // namespace hvd::agent
