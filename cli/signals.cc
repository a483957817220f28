#include "cli/signals.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>

namespace hvd::cli {
namespace {

constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP};
std::atomic<int> g_write_fd{-1};
std::atomic<bool> g_active{false};
int g_read_fd = -1;

void Handler(int signo) {
  const int saved = errno;
  const unsigned char b = static_cast<unsigned char>(signo);
  const int fd = g_write_fd.load();
  if (fd >= 0) (void)!write(fd, &b, 1);
  errno = saved;
}

}  // namespace

Status SignalWatcher::Start(std::function<void(int, int)> on_signal,
                            std::unique_ptr<SignalWatcher>* out) {
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
  struct sigaction sa;
  std::memset(&sa, 0, sizeof(sa));
  sa.sa_handler = Handler;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int s : kSignals) sigaction(s, &sa, nullptr);
  w->thread_ = std::thread([raw = w.get()] { raw->Loop(); });
  *out = std::move(w);
  return Status::OK();
}

void SignalWatcher::Loop() {
  int count = 0;
  while (true) {
    unsigned char b = 0;
    const ssize_t n = read(g_read_fd, &b, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0 || b == 0) return;  // 0: the destructor's stop byte
    on_signal_(b, ++count);
  }
}

SignalWatcher::~SignalWatcher() {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof(sa));
  sa.sa_handler = SIG_DFL;
  for (int s : kSignals) sigaction(s, &sa, nullptr);
  const int wfd = g_write_fd.exchange(-1);
  const unsigned char stop = 0;
  (void)!write(wfd, &stop, 1);
  if (thread_.joinable()) thread_.join();
  close(wfd);
  close(g_read_fd);
  g_read_fd = -1;
  g_active = false;
}

}  // namespace hvd::cli
