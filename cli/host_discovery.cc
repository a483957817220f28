#include "cli/host_discovery.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/clock.h"
#include "control/log_escape.h"
#include "control/text.h"

namespace hvd::cli {
namespace {

using Clock = std::chrono::steady_clock;

// Output beyond this is not host lines: a script gone wrong.
constexpr size_t kMaxOutputBytes = 1 << 20;

std::string Shown(const std::string& command) {
  return control::LogEscape(command, 200);
}

// Reads both pipes until they close, the deadline passes, too much came or `cancel_fd` (when not
// -1) becomes readable.
void ReadUntil(int out_fd, int err_fd, int cancel_fd, Clock::time_point deadline, std::string* out,
               std::string* err, bool* timed_out, bool* cancelled) {
  pollfd fds[3] = {{out_fd, POLLIN, 0}, {err_fd, POLLIN, 0}, {cancel_fd, POLLIN, 0}};
  std::string* into[2] = {out, err};
  int open = 2;
  char buf[4096];
  while (open > 0) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0 || out->size() + err->size() > kMaxOutputBytes) {
      *timed_out = left.count() <= 0;
      return;
    }
    if (poll(fds, 3, static_cast<int>(left.count())) < 0 && errno != EINTR) return;
    if (fds[2].revents != 0) {
      *cancelled = true;
      return;
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      const ssize_t n = read(fds[i].fd, buf, sizeof buf);
      if (n > 0) {
        into[i]->append(buf, static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        fds[i].fd = -1;
        --open;
      }
    }
  }
}

// A script's stderr in a message: its lines joined with "; " (LogEscape showed them as "\n").
std::string OneLine(const std::string& text) {
  std::string joined;
  for (std::string_view line : control::SplitLines(control::TrimRight(text))) {
    if (line.empty()) continue;
    if (!joined.empty()) joined += "; ";
    joined += line;
  }
  return control::LogEscape(joined, 300);
}

}  // namespace

Status RunDiscoveryScript(const std::string& command, std::chrono::milliseconds timeout,
                          int default_slots, std::vector<control::HostSlots>* hosts,
                          int cancel_fd) {
  const std::string what = "--host-discovery-script '" + Shown(command) + "'";
  if (cancel_fd >= 0) {  // stopped already: not started at all
    pollfd stop = {cancel_fd, POLLIN, 0};
    if (poll(&stop, 1, 0) > 0) return Status(StatusCode::kCancelled, what + " was not started");
  }
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0) return Internal(std::string("pipe: ") + std::strerror(errno));
  if (pipe2(err, O_CLOEXEC) != 0) {
    close(out[0]);
    close(out[1]);
    return Internal(std::string("pipe: ") + std::strerror(errno));
  }
  const pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);  // its own group: a timeout kills whatever it started too
    dup2(out[1], STDOUT_FILENO);
    dup2(err[1], STDERR_FILENO);
    const int null = open("/dev/null", O_RDONLY);
    if (null >= 0) dup2(null, STDIN_FILENO);
    execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  // Here too: the group must exist before a kill below, which may come at once. Once the child
  // has exec'd this fails (EACCES), its own call having made the group.
  if (pid > 0) setpgid(pid, pid);
  close(out[1]);
  close(err[1]);
  if (pid < 0) {
    close(out[0]);
    close(err[0]);
    return Internal(std::string("fork: ") + std::strerror(errno));
  }
  std::string text, errors;
  bool timed_out = false, cancelled = false;
  ReadUntil(out[0], err[0], cancel_fd, Clock::now() + timeout, &text, &errors, &timed_out,
            &cancelled);
  close(out[0]);
  close(err[0]);
  kill(-pid, SIGKILL);  // done or not: nothing it started outlives the run
  kill(pid, SIGKILL);   // and the script itself, whatever its group
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (cancelled) return Status(StatusCode::kCancelled, what + " was stopped: the job ends");
  if (timed_out) {
    return Unavailable(what + " did not finish within " + base::SecondsText(timeout));
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return Unavailable(what + " failed (" +
                       (WIFEXITED(status)
                            ? "exit code " + std::to_string(WEXITSTATUS(status))
                            : "killed by signal " + std::to_string(WTERMSIG(status))) +
                       ")" + (errors.empty() ? "" : ": " + OneLine(errors)));
  }
  hosts->clear();
  size_t start = 0;
  for (int line = 1; start < text.size(); ++line) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string l = text.substr(start, end - start);
    start = end + 1;
    while (!l.empty() && (l.back() == '\r' || l.back() == ' ' || l.back() == '\t')) l.pop_back();
    while (!l.empty() && (l.front() == ' ' || l.front() == '\t')) l.erase(0, 1);
    if (l.empty()) continue;
    std::vector<control::HostSlots> one;
    Status s = control::ParseHostList(l, &one, default_slots);
    if (!s.ok() || one.size() != 1) {
      return InvalidArgument(what + " printed '" + control::LogEscape(l, 120) + "' on line " +
                             std::to_string(line) + ": " +
                             (s.ok() ? "one host per line" : s.message()) +
                             "; it must print one host per line, as HOST:SLOTS or HOST");
    }
    for (const control::HostSlots& h : *hosts) {
      if (h.host == one[0].host) {
        return InvalidArgument(what + " printed host " + h.host +
                               " twice; print each host once with all its slots");
      }
    }
    hosts->push_back(one[0]);
  }
  if (hosts->empty()) return InvalidArgument(what + " printed no host");
  return Status::OK();
}

HostDiscovery::HostDiscovery(Options options, std::vector<control::HostSlots> initial,
                             std::function<Status(const std::vector<control::HostSlots>&)> update,
                             std::function<void(const std::string&)> say)
    : options_(std::move(options)),
      current_(std::move(initial)),
      update_(std::move(update)),
      say_(std::move(say)),
      stop_fd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)),
      thread_([this] { Loop(); }) {}

HostDiscovery::~HostDiscovery() {
  Stop();
  if (stop_fd_ >= 0) close(stop_fd_);
}

void HostDiscovery::Stop() {
  {
    base::MutexLock lock(&mu_);
    stop_ = true;
    cv_.NotifyAll();
  }
  // A script running now is ended at once: a hung one held hvdrun's exit, and Ctrl-C, for up to
  // its timeout (10 s).
  const uint64_t one = 1;
  if (stop_fd_ >= 0 && write(stop_fd_, &one, sizeof one) < 0) {
    // EAGAIN: the counter is full, so the script is being stopped already
  }
  if (thread_.joinable()) thread_.join();
}

void HostDiscovery::Loop() {
  std::string last_problem;
  for (;;) {
    {
      base::MutexLock lock(&mu_);
      if (cv_.WaitFor(lock, options_.interval, [&]() HVD_REQUIRES(mu_) { return stop_; })) return;
    }
    std::vector<control::HostSlots> hosts;
    Status s = RunDiscoveryScript(options_.command, options_.timeout, options_.default_slots,
                                  &hosts, stop_fd_);
    if (s.code() == StatusCode::kCancelled) return;  // Stop(): nothing to say of it
    if (s.ok() && hosts != current_) {
      s = update_(hosts);
      if (s.ok()) {
        current_ = hosts;
        last_problem.clear();
        continue;
      }
    }
    if (s.ok()) {
      last_problem.clear();
    } else if (s.message() != last_problem) {  // once per distinct problem, not every second
      last_problem = s.message();
      say_(s.message() + "; the job keeps the hosts it has");
    }
  }
}

}  // namespace hvd::cli
