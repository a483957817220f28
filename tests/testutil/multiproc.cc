// Multi-process harness: fork, report through pipes, reap everything. See multiproc.h.
//
// Wire format on each child's pipe: the decimal StatusCode, '\n', then the message bytes.
#include "testutil/multiproc.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <optional>

#include "rendezvous/store.h"
#include "transport/connect.h"
#include "transport/tcp/tcp_transport.h"

namespace hvd::testing {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

struct Child {
  pid_t pid = -1;
  int fd = -1;  // read end of the status pipe; -1 once closed
  std::string data;
  bool reaped = false;
};

void WriteAll(int fd, const std::string& s) {
  size_t done = 0;
  while (done < s.size()) {
    ssize_t n = write(fd, s.data() + done, s.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the parent is gone; nothing to tell
    done += static_cast<size_t>(n);
  }
}

[[noreturn]] void RunChild(int rank, int size, const std::string& dir, const RankFn& fn,
                           int write_fd, pid_t parent, bool had_failure) {
  // Die with the harness even if it crashes; close the race where it died before prctl.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(125);
  Status st;
  try {
    st = fn(rank, size, dir);
  } catch (const std::exception& e) {
    st = Internal(std::string("exception escaped the rank function: ") + e.what());
  } catch (...) {
    st = Internal("unknown exception escaped the rank function");
  }
  if (st.ok() && !had_failure && ::testing::Test::HasFailure()) {
    st = Internal("a gtest assertion failed in this rank (see the output above)");
  }
  WriteAll(write_fd, std::to_string(static_cast<int>(st.code())) + "\n" + st.message());
  close(write_fd);
  fflush(nullptr);
  _exit(st.ok() ? 0 : 1);
}

void ParseReport(const std::string& data, RankResult* r) {
  const size_t nl = data.find('\n');
  if (nl == std::string::npos) return;  // died before reporting (or mid-report)
  const int code = atoi(data.substr(0, nl).c_str());
  r->reported = true;
  r->status = code == 0 ? Status::OK() : Status(static_cast<StatusCode>(code), data.substr(nl + 1));
}

void ReadAvailable(Child& c) {
  char buf[4096];
  for (;;) {
    ssize_t n = read(c.fd, buf, sizeof(buf));
    if (n > 0) {
      c.data.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    close(c.fd);  // EOF or a real error: either way nothing more will come
    c.fd = -1;
    return;
  }
}

void RecordExit(int wstatus, Clock::time_point start, RankResult* r) {
  r->elapsed = std::chrono::duration_cast<milliseconds>(Clock::now() - start);
  if (WIFEXITED(wstatus)) {
    r->exited = true;
    r->exit_code = WEXITSTATUS(wstatus);
  } else if (WIFSIGNALED(wstatus)) {
    r->term_signal = WTERMSIG(wstatus);
  }
}

// Kills and reaps every child not yet reaped when it goes out of scope, so that no path out of
// RunRanks (including an exception) leaves a child behind.
class ChildReaper {
 public:
  explicit ChildReaper(std::vector<Child>* children) : children_(children) {}
  ~ChildReaper() {
    for (Child& c : *children_) {
      if (c.pid > 0 && !c.reaped) {
        kill(c.pid, SIGKILL);
        while (waitpid(c.pid, nullptr, 0) < 0 && errno == EINTR) {
        }
        c.reaped = true;
      }
      if (c.fd >= 0) {
        close(c.fd);
        c.fd = -1;
      }
    }
  }
  ChildReaper(const ChildReaper&) = delete;
  ChildReaper& operator=(const ChildReaper&) = delete;

 private:
  std::vector<Child>* children_;
};

}  // namespace

std::string RankResult::Describe() const {
  std::string s = "rank " + std::to_string(rank) + ": ";
  if (reported) {
    s += status.ToString();
  } else {
    s += "no status reported";
  }
  if (killed_by_harness) {
    s += " (killed by the harness after " + std::to_string(elapsed.count()) + " ms)";
  } else if (term_signal != 0) {
    s += " (killed by signal " + std::to_string(term_signal) + " (" + strsignal(term_signal) +
         ") after " + std::to_string(elapsed.count()) + " ms)";
  } else if (exited && (exit_code != 0 || !reported)) {
    s += " (exit code " + std::to_string(exit_code) + ")";
  }
  return s;
}

bool RunResult::ok() const {
  if (timed_out) return false;
  return std::all_of(ranks.begin(), ranks.end(), [](const RankResult& r) { return r.ok(); });
}

std::string RunResult::FailureMessage() const {
  if (ok()) return "";
  std::string s;
  if (timed_out) s += "timed out after " + std::to_string(elapsed.count()) + " ms\n";
  for (const RankResult& r : ranks) {
    if (!r.ok()) s += r.Describe() + "\n";
  }
  return s;
}

RunResult RunRanks(int size, RankFn fn, RunOptions options) {
  const Clock::time_point start = Clock::now();
  RunResult result;
  result.ranks.resize(static_cast<size_t>(std::max(size, 0)));
  for (int r = 0; r < size; ++r) result.ranks[r].rank = r;
  auto fail_all = [&](const std::string& why) {
    for (RankResult& r : result.ranks) {
      r.reported = true;
      r.status = Internal("harness: " + why);
    }
    return result;
  };
  if (size <= 0) return result;

  const char* tmp = getenv("TMPDIR");
  std::string templ = std::string(tmp && *tmp ? tmp : "/tmp") + "/hvd-test-XXXXXX";
  if (mkdtemp(templ.data()) == nullptr) {
    return fail_all("mkdtemp(" + templ + "): " + strerror(errno));
  }
  result.store_dir = templ;

  // Unflushed stdio would otherwise be written once by every child as well.
  fflush(nullptr);
  const bool had_failure = ::testing::Test::HasFailure();
  const pid_t parent = getpid();
  std::vector<Child> children(static_cast<size_t>(size));
  ChildReaper reaper(&children);
  std::optional<std::string> harness_error;
  for (int r = 0; r < size; ++r) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
      harness_error = std::string("pipe2: ") + strerror(errno);
      break;
    }
    pid_t pid = fork();
    if (pid < 0) {
      harness_error = std::string("fork: ") + strerror(errno);
      close(fds[0]);
      close(fds[1]);
      break;
    }
    if (pid == 0) {
      for (int p = 0; p < r; ++p) close(children[p].fd);
      close(fds[0]);
      RunChild(r, size, result.store_dir, fn, fds[1], parent, had_failure);
    }
    close(fds[1]);
    fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) | O_NONBLOCK);
    children[r].pid = pid;
    children[r].fd = fds[0];
  }

  const Clock::time_point deadline = start + options.timeout;
  std::optional<Clock::time_point> kill_at;
  if (harness_error) kill_at = Clock::now();
  for (;;) {
    bool all_done = true;
    for (int r = 0; r < size; ++r) {
      Child& c = children[r];
      if (c.pid < 0 || c.reaped) continue;
      int ws = 0;
      pid_t w = waitpid(c.pid, &ws, WNOHANG);
      if (w == c.pid) {
        c.reaped = true;
        RecordExit(ws, start, &result.ranks[r]);
        const bool clean = WIFEXITED(ws) && WEXITSTATUS(ws) == 0;
        if (!clean && !kill_at) kill_at = Clock::now() + options.failure_grace;
      } else {
        all_done = false;
      }
    }
    if (all_done) break;
    const Clock::time_point now = Clock::now();
    if (now >= deadline) result.timed_out = true;
    if (now >= deadline || (kill_at && now >= *kill_at)) break;

    // Drain the pipes (a large report must not block its writer), then sleep briefly: exits are
    // noticed by polling waitpid, which keeps the harness free of SIGCHLD handlers.
    std::vector<pollfd> pfds;
    std::vector<int> which;
    for (int r = 0; r < size; ++r) {
      if (children[r].fd >= 0) {
        pfds.push_back({children[r].fd, POLLIN, 0});
        which.push_back(r);
      }
    }
    poll(pfds.data(), pfds.size(), 10);
    for (size_t i = 0; i < pfds.size(); ++i) {
      if (pfds[i].revents != 0) ReadAvailable(children[which[i]]);
    }
  }

  // Kill and reap whatever is left, then collect the reports.
  for (int r = 0; r < size; ++r) {
    Child& c = children[r];
    if (c.pid < 0 || c.reaped) continue;
    kill(c.pid, SIGKILL);
    int ws = 0;
    while (waitpid(c.pid, &ws, 0) < 0 && errno == EINTR) {
    }
    c.reaped = true;
    RecordExit(ws, start, &result.ranks[r]);
    result.ranks[r].killed_by_harness = true;
  }
  for (int r = 0; r < size; ++r) {
    Child& c = children[r];
    if (c.fd >= 0) ReadAvailable(c);  // the writer is dead: reads what is left, then EOF
    if (c.fd >= 0) {                  // a grandchild inherited the write end: stop listening
      close(c.fd);
      c.fd = -1;
    }
    ParseReport(c.data, &result.ranks[r]);
    if (c.pid < 0) {
      result.ranks[r].reported = true;
      result.ranks[r].status = Internal("harness: rank not started: " + harness_error.value_or(""));
    }
  }

  if (!options.keep_store_dir) {
    std::error_code ec;
    std::filesystem::remove_all(result.store_dir, ec);
  }
  result.elapsed = std::chrono::duration_cast<milliseconds>(Clock::now() - start);
  return result;
}

Status ConnectTcp(int rank, int size, const std::string& store_dir,
                  std::unique_ptr<runtime::transport::Transport>* out, const std::string& scope) {
  std::unique_ptr<runtime::rendezvous::Store> store;
  const std::string ctx = "ConnectTcp rank " + std::to_string(rank) + " of " + std::to_string(size);
  HVD_RETURN_IF_ERROR_CTX(runtime::rendezvous::NewFileStore(store_dir, &store), ctx);
  runtime::transport::tcp::TcpOptions options;
  options.scope = scope;
  HVD_RETURN_IF_ERROR_CTX(runtime::transport::tcp::Connect(*store, rank, size, options, out), ctx);
  return Status::OK();
}

std::vector<std::string> SplitHosts(int size, int hosts) {
  std::vector<std::string> names(size);
  for (int r = 0; r < size; ++r) names[r] = "host" + std::to_string(r * hosts / size);
  return names;
}

Status ConnectHosts(int rank, int size, const std::string& store_dir,
                    const std::vector<std::string>& hosts, bool shm,
                    std::unique_ptr<runtime::transport::Transport>* out, const std::string& scope) {
  std::unique_ptr<runtime::rendezvous::Store> store;
  const std::string ctx =
      "ConnectHosts rank " + std::to_string(rank) + " of " + std::to_string(size);
  HVD_RETURN_IF_ERROR_CTX(runtime::rendezvous::NewFileStore(store_dir, &store), ctx);
  runtime::transport::ConnectOptions options;
  options.hosts = hosts;
  options.use_shm = shm;
  options.tcp.scope = scope + "/tcp";
  options.shm.scope = scope + "/shm";
  HVD_RETURN_IF_ERROR_CTX(runtime::transport::Connect(*store, rank, size, options, out), ctx);
  return Status::OK();
}

}  // namespace hvd::testing
