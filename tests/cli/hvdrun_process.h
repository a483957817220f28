// Runs the built hvdrun as a real process for the tests, and proves afterwards that nothing it
// started survives it.
//
// The test process makes itself a child subreaper: any process hvdrun started that outlives it
// (a rank its agent failed to end) is re-parented to the test instead of init, where
// `Leftovers()` finds it, kills it, and reports it as a failure. hvdrun itself runs in its own
// process group with PDEATHSIG, and every wait is bounded: a hung hvdrun is SIGKILLed.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace hvd::clitest {

using Clock = std::chrono::steady_clock;

inline std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void WriteFile(const std::string& path, const std::string& content, mode_t mode = 0644) {
  std::ofstream(path) << content;
  chmod(path.c_str(), mode);
}

// A fresh directory under $TMPDIR (or /tmp), removed by the destructor.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base != nullptr ? base : "/tmp") + "/hvdrun_test.XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    path_ = mkdtemp(buf.data());
  }
  ~TempDir() { (void)!std::system(("rm -rf '" + path_ + "'").c_str()); }
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

struct ProcResult {
  int exit_code = -1;  // 128+signal when killed by a signal
  int signal = 0;
  bool timed_out = false;
  double seconds = 0;
  std::string out, err;
};

inline void BecomeSubreaper() {
  static const bool done = [] {
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    return true;
  }();
  (void)done;
}

class Proc {
 public:
  // Starts argv with stdout and stderr captured in files of `dir`; `env` entries (NAME=VALUE)
  // are added to (or replace those of) this process's environment, and "NAME=" removes NAME.
  Proc(const std::vector<std::string>& argv, const std::string& dir,
       const std::vector<std::string>& env = {}, const std::string& cwd = "") {
    BecomeSubreaper();
    static int counter = 0;
    const std::string tag = std::to_string(getpid()) + "." + std::to_string(++counter);
    out_path_ = dir + "/proc." + tag + ".out";
    err_path_ = dir + "/proc." + tag + ".err";
    std::vector<std::string> envs;
    for (char** e = environ; *e != nullptr; ++e) {
      std::string entry = *e;
      bool replaced = false;
      for (const std::string& x : env) {
        if (entry.substr(0, entry.find('=') + 1) == x.substr(0, x.find('=') + 1)) replaced = true;
      }
      if (!replaced) envs.push_back(entry);
    }
    for (const std::string& x : env) {
      if (x.back() != '=') envs.push_back(x);  // "NAME=": unset
    }
    std::vector<char*> cargv, cenv;
    for (const std::string& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
    cargv.push_back(nullptr);
    for (const std::string& e : envs) cenv.push_back(const_cast<char*>(e.c_str()));
    cenv.push_back(nullptr);
    start_ = Clock::now();
    pid_ = fork();
    if (pid_ == 0) {
      // Only async-signal-safe calls between fork and exec.
      setpgid(0, 0);
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      int o = open(out_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      int e = open(err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(o, 1);
      dup2(e, 2);
      if (!cwd.empty() && chdir(cwd.c_str()) != 0) _exit(126);
      execve(cargv[0], cargv.data(), cenv.data());
      _exit(127);
    }
    setpgid(pid_, pid_);  // also here, so a signal sent right away reaches the group
  }
  ~Proc() {
    if (!reaped_) Wait(std::chrono::milliseconds(0));
  }

  pid_t pid() const { return pid_; }
  void Signal(int sig) { kill(pid_, sig); }
  std::string Out() const { return ReadAll(out_path_); }
  std::string Err() const { return ReadAll(err_path_); }

  // Waits up to `timeout`; then SIGKILLs its process group and reports timed_out.
  ProcResult Wait(std::chrono::milliseconds timeout) {
    ProcResult r;
    const auto deadline = Clock::now() + timeout;
    int status = 0;
    while (true) {
      pid_t w = waitpid(pid_, &status, WNOHANG);
      if (w == pid_) break;
      if (Clock::now() >= deadline) {
        r.timed_out = true;
        kill(-pid_, SIGKILL);
        waitpid(pid_, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    reaped_ = true;
    r.seconds = std::chrono::duration<double>(Clock::now() - start_).count();
    if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) {
      r.signal = WTERMSIG(status);
      r.exit_code = 128 + r.signal;
    }
    r.out = Out();
    r.err = Err();
    return r;
  }

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
  Clock::time_point start_;
  std::string out_path_, err_path_;
};

// Runs argv to completion (bounded).
inline ProcResult RunProcess(const std::vector<std::string>& argv, const std::string& dir,
                             std::chrono::milliseconds timeout = std::chrono::seconds(60),
                             const std::vector<std::string>& env = {},
                             const std::string& cwd = "") {
  Proc p(argv, dir, env, cwd);
  return p.Wait(timeout);
}

// Live processes whose parent is this one ("pid (comm)"), reaping zombies on the way.
inline std::vector<std::string> LiveChildren() {
  std::vector<std::string> live;
  while (waitpid(-1, nullptr, WNOHANG) > 0) {
  }
  DIR* d = opendir("/proc");
  if (d == nullptr) return live;
  const pid_t self = getpid();
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    const std::string stat = ReadAll(std::string("/proc/") + e->d_name + "/stat");
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    char state = 0;
    int ppid = 0;
    if (std::sscanf(stat.c_str() + close + 1, " %c %d", &state, &ppid) != 2) continue;
    if (ppid == self && state != 'Z')
      live.push_back(std::string(e->d_name) + " " +
                     stat.substr(stat.find('('), close - stat.find('(') + 1));
  }
  closedir(d);
  return live;
}

// Waits up to `wait` for every child of this process to be gone; SIGKILLs and reaps whatever is
// left and returns it (empty: nothing survived).
inline std::vector<std::string> Leftovers(
    std::chrono::milliseconds wait = std::chrono::seconds(3)) {
  const auto deadline = Clock::now() + wait;
  std::vector<std::string> live = LiveChildren();
  while (!live.empty() && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    live = LiveChildren();
  }
  for (const std::string& p : live) kill(std::atoi(p.c_str()), SIGKILL);
  for (int i = 0; i < 100 && !LiveChildren().empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return live;
}

// Whether a process with this pid exists (and is not a zombie).
inline bool ProcessAlive(pid_t pid) {
  const std::string stat = ReadAll("/proc/" + std::to_string(pid) + "/stat");
  if (stat.empty()) return false;
  const size_t close = stat.rfind(')');
  return close != std::string::npos && stat.size() > close + 2 && stat[close + 2] != 'Z';
}

// The interpreter the Python end-to-end tests run ranks with (Debian's, which has torch), and why
// it cannot run them here ("": it can); `dir` is a scratch directory for its output.
inline const std::string kTestPython = "/usr/bin/python3";
inline std::string TorchMissing(const std::string& dir) {
  ProcResult r = RunProcess({kTestPython, "-c", "import torch"}, dir, std::chrono::seconds(30));
  return r.exit_code == 0 ? "" : kTestPython + " cannot import torch: " + r.err;
}

}  // namespace hvd::clitest
