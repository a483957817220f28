// One worker process: spawned under the worker wrapper (worker_wrapper.h) into its own process
// group and cgroup, supervised by one thread that forwards its output line by line and reaps the
// wrapper, and stopped by signalling the worker's whole group (and killing its cgroup).
//
// The supervising thread is also the thread that forks: PR_SET_PDEATHSIG fires when the *thread*
// that created the child ends, not the process, so the child must be created by a thread that
// lives exactly as long as the child does. Killing the agent (even with SIGKILL) kills every
// worker it started and everything they started: the wrappers see their lifeline break.
#pragma once

#include <chrono>
#include <csignal>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "agent/output_lines.h"
#include "agent/stdin_feed.h"
#include "base/mutex.h"
#include "control/job_model.h"
#include "hvd/status.h"

namespace hvd::agent {

struct RankExit {
  int pid = 0;
  int exit_code = 0;        // meaningful when signal == 0
  int signal = 0;           // the signal that ended it, 0 when it exited
  bool stopped = false;     // Stop/RequestStop came first: hvd ended it (or asked it to end)
  std::string stderr_tail;  // its last stderr lines, '\n'-separated
  int64_t time_ms = 0;      // wall-clock ms when it ended (the wrapper's clock); 0: unknown
};

struct RankRunnerOptions {
  // argv[0] is the program: a path (relative to working_dir) or a name looked up in the PATH of
  // the worker's environment. Passed to execve verbatim: no shell, no expansion.
  std::vector<std::string> argv;
  // Set on top of the agent's own environment (these win).
  std::map<std::string, std::string> env;
  std::string working_dir;  // empty: the agent's working directory
  // REQUIRED: the binary that runs the worker wrapper (hvd-agent, hvdrun: /proc/self/exe).
  std::string wrapper;
  // The rank's cgroup directory (CgroupTree::CreateRankDir); empty: none. Killed with SIGKILL,
  // and removed, when the worker is SIGKILLed or has exited.
  std::string cgroup_dir;
  // The worker's standard input. Unset: /dev/null. Set: a pipe, whose write end this is called
  // with once the worker runs (the feed owns it, stdin_feed.h); the feed is destroyed when the
  // worker has exited, so nothing keeps feeding a rank that is gone.
  std::function<std::unique_ptr<StdinFeed>(int write_fd)> stdin_feed;
  // --run-as: the user the worker runs as (SpawnRequest::run_as); empty: the agent's.
  std::string run_as;

  // Called from the runner's thread, in this order: on_started once (before any output) with the
  // worker's pid and the wrapper's,
  // on_output for each line, on_exit once (after the last line). Never called when Start fails.
  // They must not block for long and must not destroy the runner.
  std::function<void(int pid, int wrapper_pid)> on_started;
  std::function<void(bool is_stderr, std::string line)> on_output;
  std::function<void(const RankExit&)> on_exit;

  size_t max_line_bytes = 64 << 10;
  size_t stderr_tail_lines = control::kStderrTailLines;
};

class RankRunner {
 public:
  // Spawns the worker and returns once it has exec'd. An exec or chdir failure is returned at once
  // as FailedPrecondition naming the path and the system's text ("exec ./trian: No such file or
  // directory"); nothing is left running then.
  static Status Start(RankRunnerOptions options, std::unique_ptr<RankRunner>* out);

  // Stops the worker (Stop(0)) if it still runs, and waits for its thread.
  ~RankRunner();
  RankRunner(const RankRunner&) = delete;
  RankRunner& operator=(const RankRunner&) = delete;

  // The worker's pid (also its process group id).
  int pid() const { return worker_pid_; }

  // `first_signal` (SIGTERM, or the SIGINT/SIGHUP hvdrun received) to the worker's process group
  // now, SIGKILL to the group `grace` later if the worker still runs. Returns at once; a later
  // call can only shorten the grace (a grace of 0 sends SIGKILL now).
  void RequestStop(std::chrono::milliseconds grace, int first_signal = SIGTERM);
  // RequestStop(grace), then waits until the worker is reaped and on_exit has run.
  void Stop(std::chrono::milliseconds grace);

  // Whether the worker has been reaped and on_exit has returned.
  bool done() const;
  // Waits up to `timeout` for done(); returns done().
  bool WaitDone(std::chrono::milliseconds timeout);

 private:
  explicit RankRunner(RankRunnerOptions options) : options_(std::move(options)) {}
  void Run();        // the supervising thread: spawns, then Supervise()
  void Supervise();  // forwards output until the worker exits, then reaps and reports it
  bool PumpOutput(int timeout_ms);             // one poll() round; false once both pipes are closed
  void Signal(int sig) HVD_REQUIRES(mu_);      // to the worker's group while the wrapper lives
  void ReadExit(int wstatus, RankExit* exit);  // from the wrapper's report, else its own status

  RankRunnerOptions options_;
  int pid_ = -1;         // the wrapper
  int worker_pid_ = -1;  // the worker
  int status_fd_ = -1;
  int lifeline_fd_ = -1;
  int out_fd_ = -1;  // -1 once closed
  int err_fd_ = -1;
  int pidfd_ = -1;  // readable when the worker exits; -1 on kernels without pidfd_open
  std::unique_ptr<LineSplitter> out_lines_;
  std::unique_ptr<LineSplitter> err_lines_;
  std::unique_ptr<LineTail> err_tail_;
  std::unique_ptr<StdinFeed> stdin_feed_;  // the supervising thread's
  std::string binding_note_;               // the CPU binding's note for this host (once)
  std::thread thread_;

  mutable base::Mutex mu_;
  base::CondVar cv_;
  bool started_ HVD_GUARDED_BY(mu_) = false;  // spawn finished (start_status_ set)
  Status start_status_ HVD_GUARDED_BY(mu_);
  bool stop_requested_ HVD_GUARDED_BY(mu_) = false;
  // SIGKILL deadline once stop_requested_
  std::chrono::steady_clock::time_point kill_at_ HVD_GUARDED_BY(mu_);
  bool kill_sent_ HVD_GUARDED_BY(mu_) = false;
  bool reaped_ HVD_GUARDED_BY(mu_) = false;
  bool done_ HVD_GUARDED_BY(mu_) = false;
  int wake_fd_[2] = {-1, -1};  // RequestStop wakes the supervising thread's poll()
};

}  // namespace hvd::agent
