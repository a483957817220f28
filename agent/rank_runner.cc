#include "agent/rank_runner.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "agent/cgroup.h"
#include "agent/process_spawn.h"
#include "agent/worker_wrapper.h"
#include "base/logging.h"

namespace hvd::agent {
namespace {

using Clock = std::chrono::steady_clock;

// Without pidfd (kernels before 5.3) the worker's exit is noticed by polling this often.
constexpr int kExitPollMs = 50;
// After the worker exits its group is SIGKILLed; output still in flight is read for this long. A
// process that left the group (setsid) and keeps the pipe open must not hold the report back.
constexpr auto kDrainAfterExit = std::chrono::seconds(1);

void CloseFd(int* fd) {
  if (*fd >= 0) close(*fd);
  *fd = -1;
}

// Whether `pid` has exited, without reaping it: while it is an unreaped zombie its pid, and so
// its process group id, cannot be reused, which makes signalling the group afterwards safe.
bool HasExited(int pid) {
  siginfo_t info{};
  if (waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) != 0) {
    return errno == ECHILD;  // someone else reaped it (SIGCHLD ignored): gone all the same
  }
  return info.si_pid == pid;
}

}  // namespace

Status RankRunner::Start(RankRunnerOptions options, std::unique_ptr<RankRunner>* out) {
  std::unique_ptr<RankRunner> r(new RankRunner(std::move(options)));
  if (pipe2(r->wake_fd_, O_CLOEXEC | O_NONBLOCK) != 0) {
    return Unavailable(std::string("cannot create a pipe: ") + std::strerror(errno));
  }
  r->thread_ = std::thread(&RankRunner::Run, r.get());
  Status status;
  {
    base::MutexLock lock(&r->mu_);
    r->cv_.Wait(lock, [&]() HVD_REQUIRES(r->mu_) { return r->started_; });
    status = r->start_status_;
  }
  if (!status.ok()) {
    r->thread_.join();  // it has already returned
    return status;
  }
  *out = std::move(r);
  return Status::OK();
}

RankRunner::~RankRunner() {
  if (thread_.joinable()) {
    bool running;
    {
      base::MutexLock lock(&mu_);
      running = start_status_.ok();
    }
    if (running) Stop(std::chrono::milliseconds(0));
    thread_.join();
  }
  CloseFd(&wake_fd_[0]);
  CloseFd(&wake_fd_[1]);
  CloseFd(&status_fd_);
  CloseFd(&lifeline_fd_);
}

void RankRunner::Run() {
  SpawnRequest request{options_.argv, options_.env, options_.working_dir, options_.wrapper,
                       options_.cgroup_dir.empty() ? "" : options_.cgroup_dir + "/cgroup.procs"};
  SpawnedProcess proc;
  int in_pipe[2] = {-1, -1};
  Status s;
  if (options_.stdin_feed && pipe2(in_pipe, O_CLOEXEC) != 0) {
    s = Unavailable(std::string("cannot create the worker's stdin pipe: ") + std::strerror(errno));
  }
  request.stdin_fd = in_pipe[0];
  request.run_as = options_.run_as;
  if (s.ok()) s = SpawnProcess(request, &proc);
  CloseFd(&in_pipe[0]);  // the worker has its own copy
  if (s.ok() && in_pipe[1] >= 0) {
    stdin_feed_ = options_.stdin_feed(in_pipe[1]);  // owns the write end now
    in_pipe[1] = -1;
  }
  CloseFd(&in_pipe[1]);
  if (s.ok() && !proc.binding_note.empty()) {
    HVD_LOG(INFO) << proc.binding_note;
    binding_note_ = proc.binding_note;  // told to the user as the rank's first stderr line
  }
  if (s.ok() && !proc.cpus.empty()) {
    HVD_LOG(INFO) << options_.argv[0] << " (pid " << proc.worker_pid << ") bound to CPUs "
                  << proc.cpus;
  }
  {
    base::MutexLock lock(&mu_);
    started_ = true;
    start_status_ = s;
    if (s.ok()) {
      pid_ = proc.pid;
      worker_pid_ = proc.worker_pid;
      out_fd_ = proc.stdout_fd;
      err_fd_ = proc.stderr_fd;
      status_fd_ = proc.status_fd;
      lifeline_fd_ = proc.lifeline_fd;
    }
  }
  cv_.NotifyAll();
  if (!s.ok()) return;
  Supervise();
}

void RankRunner::Supervise() {
  pidfd_ = static_cast<int>(syscall(SYS_pidfd_open, pid_, 0));
  out_lines_ = std::make_unique<LineSplitter>(options_.max_line_bytes, [this](std::string line) {
    if (options_.on_output) options_.on_output(false, std::move(line));
  });
  err_tail_ = std::make_unique<LineTail>(options_.stderr_tail_lines);
  err_lines_ = std::make_unique<LineSplitter>(options_.max_line_bytes, [this](std::string line) {
    err_tail_->Add(line);
    if (options_.on_output) options_.on_output(true, std::move(line));
  });
  if (options_.on_started) options_.on_started(worker_pid_, pid_);
  // Where the user sees it, whichever host the rank runs on (not part of the stderr tail).
  if (!binding_note_.empty() && options_.on_output) {
    options_.on_output(true, "hvd-agent: " + binding_note_);
  }

  while (true) {
    int timeout_ms = pidfd_ >= 0 ? -1 : kExitPollMs;
    {
      base::MutexLock lock(&mu_);
      if (stop_requested_ && !kill_sent_) {
        const auto left = std::chrono::ceil<std::chrono::milliseconds>(kill_at_ - Clock::now());
        if (left.count() <= 0) {
          Signal(SIGKILL);
          kill_sent_ = true;
        } else if (timeout_ms < 0 || left.count() < timeout_ms) {
          timeout_ms = static_cast<int>(left.count());
        }
      }
    }
    if (HasExited(pid_)) break;
    PumpOutput(timeout_ms);
  }
  stdin_feed_.reset();  // the worker is gone: stop feeding its stdin (bounded: cancels the call)

  // The wrapper has killed whatever the worker left in its group, its cgroup and below it before
  // exiting. Output still in flight is read for a moment: a process that escaped all of that must
  // not hold the report back by keeping the pipe open.
  CloseFd(&pidfd_);  // stays readable from now on; poll() must wait on the pipes alone
  const auto drain_until = Clock::now() + kDrainAfterExit;
  while ((out_fd_ >= 0 || err_fd_ >= 0) && Clock::now() < drain_until) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(drain_until - Clock::now());
    if (!PumpOutput(static_cast<int>(left.count()))) break;
  }
  CloseFd(&out_fd_);
  CloseFd(&err_fd_);
  out_lines_->Finish();
  err_lines_->Finish();

  int wstatus = 0;
  pid_t r;
  RankExit exit;
  exit.pid = worker_pid_;
  {
    // Reaping and marking it reaped are one step for Signal(): once the wrapper is gone the
    // worker's pid may be reused, and no kill() may reach it. The wrapper has exited, so waitpid
    // returns at once.
    base::MutexLock lock(&mu_);
    do {
      r = waitpid(pid_, &wstatus, 0);
    } while (r < 0 && errno == EINTR);
    reaped_ = true;
    exit.stopped = stop_requested_;
  }
  CloseFd(&lifeline_fd_);
  if (r < 0) {
    // Reaped by someone else (the embedding process set SIGCHLD to SIG_IGN): status unknown.
    HVD_LOG(WARNING) << "worker wrapper pid " << pid_ << " was reaped outside hvd-agent ("
                     << std::strerror(errno) << "); reporting exit code -1";
    exit.exit_code = -1;
  } else {
    ReadExit(wstatus, &exit);
  }
  CloseFd(&status_fd_);
  // A wrapper that was itself killed could not clean up; the cgroup still holds what is left.
  if (!options_.cgroup_dir.empty()) KillCgroupNow(options_.cgroup_dir);
  exit.stderr_tail = err_tail_->Text();
  if (options_.on_exit) options_.on_exit(exit);
  {
    base::MutexLock lock(&mu_);
    done_ = true;
  }
  cv_.NotifyAll();
}

void RankRunner::ReadExit(int wstatus, RankExit* exit) {
  WrapperReport report;
  ssize_t n;
  do {
    n = read(status_fd_, &report, sizeof report);  // the wrapper has exited: never blocks long
  } while (n < 0 && errno == EINTR);
  // Earlier records (kStarted) were consumed at spawn; kExited is the only one left.
  if (n == static_cast<ssize_t>(sizeof report) && report.kind == WrapperReport::kExited) {
    exit->exit_code = report.a;
    exit->signal = report.b;
    exit->time_ms = report.time_ms;
    return;
  }
  // The wrapper died before it could report (SIGKILLed by someone): its worker died with it
  // (PR_SET_PDEATHSIG); say what is known.
  HVD_LOG(WARNING) << "the worker wrapper of pid " << worker_pid_ << " ended without a report ("
                   << (WIFSIGNALED(wstatus)
                           ? "killed by signal " + std::to_string(WTERMSIG(wstatus))
                           : "exit " + std::to_string(WEXITSTATUS(wstatus)))
                   << ")";
  if (WIFSIGNALED(wstatus)) {
    exit->signal = WTERMSIG(wstatus);
  } else {
    exit->exit_code = WEXITSTATUS(wstatus);
  }
}

bool RankRunner::PumpOutput(int timeout_ms) {
  pollfd fds[4];
  int n = 0;
  const int out_i = out_fd_ >= 0 ? n++ : -1;
  if (out_i >= 0) fds[out_i] = {out_fd_, POLLIN, 0};
  const int err_i = err_fd_ >= 0 ? n++ : -1;
  if (err_i >= 0) fds[err_i] = {err_fd_, POLLIN, 0};
  const bool pipes_open = n > 0;
  fds[n++] = {wake_fd_[0], POLLIN, 0};
  if (pidfd_ >= 0) fds[n++] = {pidfd_, POLLIN, 0};
  if (poll(fds, static_cast<nfds_t>(n), timeout_ms) <= 0) return pipes_open;

  char buf[64 << 10];
  const auto drain = [&](int index, int* fd, LineSplitter* lines) {
    if (index < 0 || fds[index].revents == 0) return;
    // One read per round so a chatty stdout cannot starve stderr or the exit check.
    const ssize_t got = read(*fd, buf, sizeof buf);
    if (got > 0) {
      lines->Feed(std::string_view(buf, static_cast<size_t>(got)));
    } else if (got == 0 || (errno != EINTR && errno != EAGAIN)) {
      CloseFd(fd);  // EOF: the worker (and all it spawned) closed this stream
    }
  };
  drain(out_i, &out_fd_, out_lines_.get());
  drain(err_i, &err_fd_, err_lines_.get());
  ssize_t unused = read(wake_fd_[0], buf, sizeof buf);  // non-blocking: clears RequestStop's byte
  (void)unused;
  return out_fd_ >= 0 || err_fd_ >= 0;
}

void RankRunner::Signal(int sig) {
  if (reaped_ || worker_pid_ <= 0) return;
  // While the wrapper lives the worker's pid is either the worker or a zombie the wrapper has not
  // reaped yet, or (for the moment between that reap and the wrapper's exit) free but not reused:
  // a pid wraps around far slower than that.
  kill(-worker_pid_, sig);
  // Also the worker itself, in case it moved to another group or session.
  kill(worker_pid_, sig);
  // A stopped worker (SIGSTOP, a debugger) handles SIGTERM (or SIGINT...) only once it runs again.
  if (sig != SIGKILL) {
    kill(-worker_pid_, SIGCONT);
    kill(worker_pid_, SIGCONT);
  }
  if (sig == SIGKILL && !options_.cgroup_dir.empty()) KillCgroupNow(options_.cgroup_dir);
}

void RankRunner::RequestStop(std::chrono::milliseconds grace, int first_signal) {
  {
    base::MutexLock lock(&mu_);
    if (reaped_ || !start_status_.ok()) return;
    const auto deadline = Clock::now() + grace;
    if (!stop_requested_) {
      stop_requested_ = true;
      kill_at_ = deadline;
      const int sig = grace.count() > 0 ? first_signal : SIGKILL;
      Signal(sig);
      if (sig == SIGKILL) kill_sent_ = true;
    } else if (deadline < kill_at_) {
      kill_at_ = deadline;
    }
  }
  const char byte = 1;
  ssize_t unused = write(wake_fd_[1], &byte, 1);  // the supervising thread re-reads kill_at_
  (void)unused;
}

void RankRunner::Stop(std::chrono::milliseconds grace) {
  RequestStop(grace);
  base::MutexLock lock(&mu_);
  cv_.Wait(lock, [&]() HVD_REQUIRES(mu_) { return done_; });
}

bool RankRunner::done() const {
  base::MutexLock lock(&mu_);
  return done_;
}

bool RankRunner::WaitDone(std::chrono::milliseconds timeout) {
  base::MutexLock lock(&mu_);
  return cv_.WaitFor(lock, timeout, [&]() HVD_REQUIRES(mu_) { return done_; });
}

}  // namespace hvd::agent
