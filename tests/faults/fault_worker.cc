// A real hvd rank for the fault-injection suite and the chaos run: it trains (allreduces a small
// gradient every step) and misbehaves on demand.
//
//   fault_worker [--steps N] [--step-ms MS] [--child] [--daemon]
//                [--exit-rank R --exit-at STEP --exit-code C [--exit-attempt A]]
//                [--hang-rank R --hang-at STEP]
//
//   --steps N         steps to run, then exit 0 (0: until killed)
//   --child           fork a "data loader" child (same process group); if it dies, the rank fails
//                     the way PyTorch's DataLoader does: an error naming it, exit code 1
//   --daemon          leave a daemonized grandchild (its own session): hvd must still end it
//   --exit-*          rank R exits with code C at step STEP (only in attempt A when given)
//   --hang-*          rank R stops submitting at step STEP and sleeps in "user code"
//
// It prints "rank R pid P", "rank R child P", "rank R daemon P" once, "rank R step S" each
// step, and "rank R done" at the end.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "hvd/hvd.h"

namespace {

[[noreturn]] void SleepForever() {
  while (true) pause();
}

pid_t SpawnChild() {
  const pid_t pid = fork();
  if (pid == 0) SleepForever();
  return pid;
}

// A grandchild in a session of its own, re-parented away from us: what a daemonizing helper
// leaves behind. Returns its pid (read back through a pipe).
pid_t SpawnDaemon() {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  const pid_t mid = fork();
  if (mid == 0) {
    setsid();
    const pid_t grand = fork();
    if (grand == 0) SleepForever();
    ssize_t unused = write(fds[1], &grand, sizeof grand);
    (void)unused;
    _exit(0);
  }
  close(fds[1]);
  pid_t grand = -1;
  ssize_t unused = read(fds[0], &grand, sizeof grand);
  (void)unused;
  close(fds[0]);
  waitpid(mid, nullptr, 0);
  return grand;
}

int Flag(const std::map<std::string, int>& flags, const char* name, int fallback) {
  auto it = flags.find(name);
  return it == flags.end() ? fallback : it->second;
}

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, int> flags;
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    if (f == "--child" || f == "--daemon") {
      flags[f] = 1;
    } else if (f.rfind("--", 0) == 0 && i + 1 < argc) {
      flags[f] = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "fault_worker: bad argument '%s'\n", argv[i]);
      return 2;
    }
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  hvd::Status s = hvd::Init();
  if (!s.ok()) {
    std::fprintf(stderr, "fault_worker: %s\n", s.ToString().c_str());
    return 1;
  }
  const int rank = hvd::Rank();
  const char* attempt_env = std::getenv("HVD_ATTEMPT");
  const int attempt = attempt_env != nullptr ? std::atoi(attempt_env) : 0;
  std::printf("rank %d pid %d attempt %d\n", rank, static_cast<int>(getpid()), attempt);
  pid_t child = -1;
  if (Flag(flags, "--child", 0)) {
    child = SpawnChild();
    std::printf("rank %d child %d\n", rank, static_cast<int>(child));
  }
  if (Flag(flags, "--daemon", 0)) {
    std::printf("rank %d daemon %d\n", rank, static_cast<int>(SpawnDaemon()));
  }
  const int steps = Flag(flags, "--steps", 0);
  const int step_ms = Flag(flags, "--step-ms", 20);
  const bool exits =
      Flag(flags, "--exit-rank", -1) == rank && Flag(flags, "--exit-attempt", attempt) == attempt;
  const bool hangs = Flag(flags, "--hang-rank", -1) == rank;
  std::vector<float> grad(1024, 1.0f);
  for (int step = 0; steps == 0 || step < steps; ++step) {
    if (exits && step == Flag(flags, "--exit-at", 0)) {
      std::fprintf(stderr, "rank %d exits with code %d at step %d as asked\n", rank,
                   Flag(flags, "--exit-code", 1), step);
      return Flag(flags, "--exit-code", 1);
    }
    if (hangs && step == Flag(flags, "--hang-at", 0)) {
      std::printf("rank %d hangs in user code at step %d\n", rank, step);
      SleepForever();
    }
    if (child > 0) {
      int status = 0;
      if (waitpid(child, &status, WNOHANG) == child) {
        std::fprintf(stderr, "RuntimeError: data loader worker (pid %d) is killed by signal: %s\n",
                     static_cast<int>(child),
                     WIFSIGNALED(status) ? strsignal(WTERMSIG(status)) : "exited");
        return 1;
      }
    }
    hvd::Tensor t = hvd::MakeTensor(grad.data(), hvd::DataType::kFloat32, grad.size());
    s = hvd::Allreduce("grad", t, t);
    if (!s.ok()) {
      std::fprintf(stderr, "fault_worker: step %d: %s\n", step, s.ToString().c_str());
      return 1;
    }
    std::printf("rank %d step %d\n", rank, step);
    std::this_thread::sleep_for(std::chrono::milliseconds(step_ms));
  }
  hvd::Shutdown();
  std::printf("rank %d done\n", rank);
  return 0;
}
