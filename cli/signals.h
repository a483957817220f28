// SIGINT, SIGTERM and SIGHUP (and SIGQUIT where asked) as calls on an ordinary thread, so an
// attached hvdrun can cancel its job (a gRPC call, not async-signal-safe) instead of dying and
// leaving the job to run on. The handler only writes the signal number and its arrival time to a
// pipe. Signals are caught, not blocked: a blocked mask would be inherited by every worker the
// embedded agent forks, and caught dispositions reset to the default at exec.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <thread>

#include "hvd/status.h"

namespace hvd::cli {

class SignalWatcher {
 public:
  // A signal arriving within this of the last one passed on is that one (delivered twice, as
  // `timeout` and a process-group kill do, or sent with another, as SIGTERM and SIGHUP by a
  // service manager), not a second Ctrl-C.
  static constexpr std::chrono::nanoseconds kSameSignal = std::chrono::milliseconds(100);

  // `on_signal(signo, count)` runs on the watcher's thread for each signal; count is 1 for the
  // first, 2 for the second... (one within kSameSignal of the last passed on is neither counted
  // nor passed on). One watcher at a time per process.
  // `on_quit` (optional): SIGQUIT (Ctrl-\) is caught too and runs it, on the same thread; it is
  // not a stop signal, so it is neither counted nor passed to `on_signal`.
  static Status Start(std::function<void(int signo, int count)> on_signal,
                      std::unique_ptr<SignalWatcher>* out, std::function<void()> on_quit = {});
  // Restores the dispositions found at Start and joins the thread.
  ~SignalWatcher();
  SignalWatcher(const SignalWatcher&) = delete;
  SignalWatcher& operator=(const SignalWatcher&) = delete;

 private:
  SignalWatcher() = default;
  void Loop();

  std::function<void(int, int)> on_signal_;
  std::function<void()> on_quit_;
  std::thread thread_;
};

// The exit code of a process ended by `signo`, as shells report it: 128 + signo.
inline int ExitCodeForSignal(int signo) {
  return 128 + signo;
}

}  // namespace hvd::cli
