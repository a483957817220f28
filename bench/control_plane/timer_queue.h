// One thread that runs callbacks at given times: every heartbeat, simulated rank start and exit,
// registration deadline and reconnect backoff of the whole swarm. A thread per agent would make
// the load generator, not the launcher, the thing that runs out of CPU at a thousand agents.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <queue>
#include <thread>
#include <vector>

namespace hvd::bench {

class TimerQueue {
 public:
  using Clock = std::chrono::steady_clock;

  TimerQueue();
  ~TimerQueue();  // Stop()
  TimerQueue(const TimerQueue&) = delete;
  TimerQueue& operator=(const TimerQueue&) = delete;

  // Runs `fn` on the timer thread at `when` (at once if it has passed). Callbacks must be short
  // and must not block: they share the thread. Ignored after Stop(). Thread-safe.
  void At(Clock::time_point when, std::function<void()> fn);
  void After(std::chrono::milliseconds delay, std::function<void()> fn) {
    At(Clock::now() + delay, std::move(fn));
  }

  // Ends the thread; callbacks not yet run are dropped. Idempotent; not from a callback.
  void Stop();

  // How late callbacks ran behind their time, at most (ms): a timer thread that falls behind
  // would make the swarm, not the launcher, miss heartbeats.
  int64_t max_lag_ms() const;

 private:
  struct Entry {
    Clock::time_point when;
    uint64_t seq;  // FIFO among equal times
    std::function<void()> fn;
    bool operator>(const Entry& o) const { return when != o.when ? when > o.when : seq > o.seq; }
  };
  void Loop();

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> queue_;  // guarded by mu_
  uint64_t next_seq_ = 0;                                                      // guarded by mu_
  bool stop_ = false;                                                          // guarded by mu_
  int64_t max_lag_ms_ = 0;                                                     // guarded by mu_
  std::thread thread_;
};

}  // namespace hvd::bench
