// cli/signals.h: signals reach hvdrun's watcher thread counted, and one signal delivered twice at
// once (`timeout -s INT`, a process-group kill), or two sent together, count once: they are not
// taken for a second Ctrl-C; SIGQUIT, where asked for, is a request that is never counted. Real
// signals, raised in this process.
#include "cli/signals.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <csignal>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace hvd::cli {
namespace {

using namespace std::chrono_literals;

class Seen {
 public:
  void Add(int signo, int count) {
    std::lock_guard<std::mutex> lock(mu_);
    calls_.emplace_back(signo, count);
    cv_.notify_all();
  }
  // The calls once there are `n` (or after 5 s).
  std::vector<std::pair<int, int>> WaitFor(size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, 5s, [&] { return calls_.size() >= n; });
    return calls_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::pair<int, int>> calls_;
};

TEST(SignalWatcher, SignalsAtOnceCountOnce) {
  Seen seen;
  std::unique_ptr<SignalWatcher> w;
  ASSERT_TRUE(SignalWatcher::Start([&](int s, int c) { seen.Add(s, c); }, &w).ok());
  raise(SIGINT);
  raise(SIGINT);  // as `timeout` delivers it: to hvdrun, then to its group
  raise(SIGHUP);  // sent together with it (as a service manager's SIGTERM and SIGHUP)
  EXPECT_EQ(seen.WaitFor(1), (std::vector<std::pair<int, int>>{{SIGINT, 1}}));
  std::this_thread::sleep_for(SignalWatcher::kSameSignal + 50ms);
  raise(SIGTERM);  // later: a second press
  EXPECT_EQ(seen.WaitFor(2), (std::vector<std::pair<int, int>>{{SIGINT, 1}, {SIGTERM, 2}}));
  w.reset();
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(seen.WaitFor(2).size(), 2u) << "a repeat passed on late";
}

// SIGQUIT, where asked for, is a request (an attached hvdrun's stacks), not a stop: each one runs
// `on_quit`, none is counted or taken for the same signal as a stop signal near it.
TEST(SignalWatcher, SigquitIsARequestNotAStop) {
  Seen seen;
  std::unique_ptr<SignalWatcher> w;
  ASSERT_TRUE(
      SignalWatcher::Start([&](int s, int c) { seen.Add(s, c); }, &w, [&] { seen.Add(SIGQUIT, 0); })
          .ok());
  raise(SIGQUIT);
  raise(SIGQUIT);
  raise(SIGINT);
  EXPECT_EQ(seen.WaitFor(3),
            (std::vector<std::pair<int, int>>{{SIGQUIT, 0}, {SIGQUIT, 0}, {SIGINT, 1}}));
  w.reset();  // SIGQUIT's default disposition is back (not raised: it would end the test)
  struct sigaction now = {};
  sigaction(SIGQUIT, nullptr, &now);
  EXPECT_EQ(now.sa_handler, SIG_DFL);
}

// A disposition found at Start is the one left after it: a SIGINT a script had hvdrun ignore
// (a background job's) stays ignored.
TEST(SignalWatcher, PutsBackTheDispositionsItFound) {
  signal(SIGINT, SIG_IGN);
  {
    std::unique_ptr<SignalWatcher> w;
    ASSERT_TRUE(SignalWatcher::Start([](int, int) {}, &w).ok());
    struct sigaction during = {};
    sigaction(SIGINT, nullptr, &during);
    EXPECT_NE(during.sa_handler, SIG_IGN);
  }
  struct sigaction after = {};
  sigaction(SIGINT, nullptr, &after);
  EXPECT_EQ(after.sa_handler, SIG_IGN);
  signal(SIGINT, SIG_DFL);
}

}  // namespace
}  // namespace hvd::cli
