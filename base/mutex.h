// Mutex, MutexLock and CondVar: std::mutex and std::condition_variable with clang thread-safety
// annotations (base/thread_annotations.h), as leveldb's port::Mutex and Abseil's Mutex.
//
// Why not std::mutex: libstdc++ does not annotate it, so clang ignores HVD_GUARDED_BY(mu_) on a
// std::mutex and cannot tell that std::lock_guard holds it. With these types the analysis
// (scripts/thread_safety.sh) checks that every guarded member is touched under its lock.
//
//   base::Mutex mu_;
//   base::CondVar cv_;
//   int count_ HVD_GUARDED_BY(mu_) = 0;
//
//   base::MutexLock lock(&mu_);
//   cv_.Wait(lock, [&]() HVD_REQUIRES(mu_) { return count_ > 0; });
//
// A wait predicate runs with the lock held, but it is a lambda, which the analysis checks on its
// own: say so with HVD_REQUIRES(mu_) on it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "base/thread_annotations.h"

namespace hvd::base {

class HVD_CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() HVD_ACQUIRE() { mu_.lock(); }
  void Unlock() HVD_RELEASE() { mu_.unlock(); }
  bool TryLock() HVD_TRY_ACQUIRE(true) { return mu_.try_lock(); }
  // Tells the analysis that the caller holds the lock, for code it cannot follow (a callback run
  // under the lock). Checks nothing at run time: std::mutex cannot say who holds it.
  void AssertHeld() const HVD_ASSERT_CAPABILITY(this) {}

 private:
  friend class CondVar;
  std::mutex mu_;
};

// Holds a Mutex for its scope; Unlock() and Lock() let go of it and take it back inside the scope
// (as std::unique_lock does), and the analysis follows both.
class HVD_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mu) HVD_ACQUIRE(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() HVD_RELEASE() {
    if (locked_) mu_->Unlock();
  }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  void Unlock() HVD_RELEASE() {
    mu_->Unlock();
    locked_ = false;
  }
  void Lock() HVD_ACQUIRE() {
    mu_->Lock();
    locked_ = true;
  }

 private:
  friend class CondVar;
  Mutex* const mu_;
  bool locked_ = true;
};

// A condition variable waited on through a held MutexLock. Each wait releases the mutex while it
// sleeps and holds it again when it returns, as std::condition_variable does.
class CondVar {
 public:
  CondVar() = default;
  CondVar(const CondVar&) = delete;
  CondVar& operator=(const CondVar&) = delete;

  void NotifyOne() { cv_.notify_one(); }
  void NotifyAll() { cv_.notify_all(); }

  void Wait(MutexLock& lock) {
    Adopted a(lock);
    cv_.wait(a.lk);
  }
  template <class Predicate>
  void Wait(MutexLock& lock, Predicate pred) {
    Adopted a(lock);
    cv_.wait(a.lk, std::move(pred));
  }
  // Returns the predicate's last value: false when the wait timed out with it still false.
  template <class Rep, class Period, class Predicate>
  bool WaitFor(MutexLock& lock, std::chrono::duration<Rep, Period> timeout, Predicate pred) {
    Adopted a(lock);
    return cv_.wait_for(a.lk, timeout, std::move(pred));
  }
  template <class Clock, class Duration, class Predicate>
  bool WaitUntil(MutexLock& lock, std::chrono::time_point<Clock, Duration> deadline,
                 Predicate pred) {
    Adopted a(lock);
    return cv_.wait_until(a.lk, deadline, std::move(pred));
  }
  // Without a predicate: may also return early (a spurious wakeup); the caller checks its state.
  template <class Rep, class Period>
  std::cv_status WaitFor(MutexLock& lock, std::chrono::duration<Rep, Period> timeout) {
    Adopted a(lock);
    return cv_.wait_for(a.lk, timeout);
  }
  template <class Clock, class Duration>
  std::cv_status WaitUntil(MutexLock& lock, std::chrono::time_point<Clock, Duration> deadline) {
    Adopted a(lock);
    return cv_.wait_until(a.lk, deadline);
  }

 private:
  // Lends the held std::mutex to a std::unique_lock for one wait, and takes it back after: the
  // MutexLock still owns it when the wait returns (or throws).
  struct Adopted {
    explicit Adopted(MutexLock& lock) : lk(lock.mu_->mu_, std::adopt_lock) {}
    ~Adopted() { lk.release(); }
    std::unique_lock<std::mutex> lk;
  };
  std::condition_variable cv_;
};

}  // namespace hvd::base
