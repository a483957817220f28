#include "cli/signals.h"

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <iterator>

namespace hvd::cli {
namespace {

constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP};
std::atomic<int> g_write_fd{-1};
std::atomic<bool> g_active{false};
int g_read_fd = -1;
// The dispositions found at Start (kSignals, then SIGQUIT), put back by the destructor: a signal a
// script had hvdrun ignore stays ignored after it.
struct sigaction g_previous[std::size(kSignals) + 1];

// One signal as the handler saw it. Written whole (a pipe write under PIPE_BUF is atomic), so the
// reader always reads whole records.
struct Arrival {
  int32_t signo;  // 0: the destructor's stop record
  int64_t ns;     // CLOCK_MONOTONIC when it arrived
};

void Handler(int signo) {
  const int saved = errno;
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);  // async-signal-safe (POSIX)
  const Arrival a{signo, static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec};
  const int fd = g_write_fd.load();
  if (fd >= 0) (void)!write(fd, &a, sizeof a);
  errno = saved;
}

}  // namespace

Status SignalWatcher::Start(std::function<void(int, int)> on_signal,
                            std::unique_ptr<SignalWatcher>* out, std::function<void()> on_quit) {
  if (g_active.exchange(true)) return Internal("a SignalWatcher is already running");
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    g_active = false;
    return Internal(std::string("signal pipe: ") + std::strerror(errno));
  }
  // Non-blocking writes: a handler must never block, even if a flood of signals fills the pipe.
  fcntl(fds[1], F_SETFL, O_NONBLOCK);
  g_read_fd = fds[0];
  g_write_fd = fds[1];
  std::unique_ptr<SignalWatcher> w(new SignalWatcher());
  w->on_signal_ = std::move(on_signal);
  w->on_quit_ = std::move(on_quit);
  struct sigaction sa;
  std::memset(&sa, 0, sizeof(sa));
  sa.sa_handler = Handler;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (size_t i = 0; i < std::size(kSignals); ++i) sigaction(kSignals[i], &sa, &g_previous[i]);
  if (w->on_quit_) sigaction(SIGQUIT, &sa, &g_previous[std::size(kSignals)]);
  w->thread_ = std::thread([raw = w.get()] { raw->Loop(); });
  *out = std::move(w);
  return Status::OK();
}

void SignalWatcher::Loop() {
  int count = 0;
  Arrival last{0, 0};
  while (true) {
    Arrival a{};
    const ssize_t n = read(g_read_fd, &a, sizeof a);
    if (n < 0 && errno == EINTR) continue;
    if (n != static_cast<ssize_t>(sizeof a) || a.signo == 0) return;  // 0: the stop record
    if (a.signo == SIGQUIT) {  // a request, not a stop: each one is passed on
      on_quit_();
      continue;
    }
    // Signals within kSameSignal of the last one passed on are that one: `timeout -s INT` and
    // `kill -INT -PGID` deliver it to hvdrun and again to its process group microseconds apart,
    // and a service manager may send SIGTERM and SIGHUP together; each counted as a second
    // Ctrl-C (SIGKILL for the ranks, without their grace).
    if (last.signo != 0 && a.ns - last.ns < kSameSignal.count()) continue;
    last = a;
    on_signal_(a.signo, ++count);
  }
}

SignalWatcher::~SignalWatcher() {
  for (size_t i = 0; i < std::size(kSignals); ++i) sigaction(kSignals[i], &g_previous[i], nullptr);
  if (on_quit_) sigaction(SIGQUIT, &g_previous[std::size(kSignals)], nullptr);
  const int wfd = g_write_fd.exchange(-1);
  const Arrival stop{0, 0};
  (void)!write(wfd, &stop, sizeof stop);
  if (thread_.joinable()) thread_.join();
  close(wfd);
  close(g_read_fd);
  g_read_fd = -1;
  g_active = false;
}

}  // namespace hvd::cli
