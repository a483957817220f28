#include "timer_queue.h"

namespace hvd::bench {

TimerQueue::TimerQueue() : thread_([this] { Loop(); }) {}

TimerQueue::~TimerQueue() {
  Stop();
}

void TimerQueue::At(Clock::time_point when, std::function<void()> fn) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stop_) return;
  const bool earliest = queue_.empty() || when < queue_.top().when;
  queue_.push(Entry{when, next_seq_++, std::move(fn)});
  if (earliest) cv_.notify_one();
}

void TimerQueue::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_ && !thread_.joinable()) return;
    stop_ = true;
    cv_.notify_one();
  }
  if (thread_.joinable()) thread_.join();
  std::lock_guard<std::mutex> lock(mu_);
  while (!queue_.empty()) queue_.pop();
}

int64_t TimerQueue::max_lag_ms() const {
  std::lock_guard<std::mutex> lock(mu_);
  return max_lag_ms_;
}

void TimerQueue::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    if (queue_.empty()) {
      cv_.wait(lock);
      continue;
    }
    const Clock::time_point when = queue_.top().when;
    const Clock::time_point now = Clock::now();
    if (when > now) {
      cv_.wait_until(lock, when);
      continue;
    }
    // priority_queue::top is const: the callback is moved out through a copy of the entry.
    std::function<void()> fn = std::move(const_cast<Entry&>(queue_.top()).fn);
    queue_.pop();
    const int64_t lag = std::chrono::duration_cast<std::chrono::milliseconds>(now - when).count();
    if (lag > max_lag_ms_) max_lag_ms_ = lag;
    lock.unlock();
    fn();
    lock.lock();
  }
}

}  // namespace hvd::bench
