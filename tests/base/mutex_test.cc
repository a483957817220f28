// base::Mutex, MutexLock and CondVar: exclusion, Unlock/Lock inside a scope, and the waits (with
// and without a predicate, with a timeout that passes and one that does not).
#include "base/mutex.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

namespace hvd::base {
namespace {

using namespace std::chrono_literals;

struct Counter {
  Mutex mu;
  CondVar cv;
  int value HVD_GUARDED_BY(mu) = 0;
};

// Whether `mu` was free: takes it if so, and lets it go at once.
bool TryAndRelease(Mutex& mu) {
  if (!mu.TryLock()) return false;
  mu.Unlock();
  return true;
}

TEST(MutexTest, MutexLockExcludesOtherThreads) {
  Counter c;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&c] {
      for (int i = 0; i < 10000; ++i) {
        MutexLock lock(&c.mu);
        c.value = c.value + 1;  // not atomic: lost updates without the lock
      }
    });
  }
  for (std::thread& t : threads) t.join();
  MutexLock lock(&c.mu);
  EXPECT_EQ(c.value, 40000);
}

TEST(MutexTest, TryLockFailsWhileHeldAndUnlockInScopeLetsGo) {
  Mutex mu;
  MutexLock lock(&mu);
  bool other = true;
  std::thread([&] { other = TryAndRelease(mu); }).join();
  EXPECT_FALSE(other) << "TryLock took a mutex another thread holds";

  lock.Unlock();
  std::thread([&] { other = TryAndRelease(mu); }).join();
  EXPECT_TRUE(other) << "MutexLock::Unlock did not release the mutex";
  lock.Lock();  // the destructor releases it again
}

TEST(CondVarTest, WaitReturnsOncePredicateHoldsAndKeepsTheLock) {
  Counter c;
  std::thread setter([&c] {
    std::this_thread::sleep_for(10ms);
    {
      MutexLock lock(&c.mu);
      c.value = 7;
    }
    c.cv.NotifyAll();
  });
  {
    MutexLock lock(&c.mu);
    c.cv.Wait(lock, [&]() HVD_REQUIRES(c.mu) { return c.value == 7; });
    EXPECT_EQ(c.value, 7);
    // Still held after the wait: another thread cannot take it.
    bool other = true;
    std::thread([&] { other = TryAndRelease(c.mu); }).join();
    EXPECT_FALSE(other) << "the mutex was not held again when Wait returned";
  }
  setter.join();
}

TEST(CondVarTest, WaitForTimesOutWithPredicateFalse) {
  Counter c;
  MutexLock lock(&c.mu);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(c.cv.WaitFor(lock, 20ms, [&]() HVD_REQUIRES(c.mu) { return c.value > 0; }));
  EXPECT_GE(std::chrono::steady_clock::now() - start, 20ms);
}

TEST(CondVarTest, WaitUntilSeesANotification) {
  Counter c;
  std::thread setter([&c] {
    MutexLock lock(&c.mu);
    c.value = 1;
    c.cv.NotifyOne();
  });
  {
    MutexLock lock(&c.mu);
    EXPECT_TRUE(c.cv.WaitUntil(lock, std::chrono::steady_clock::now() + 10s,
                               [&]() HVD_REQUIRES(c.mu) { return c.value == 1; }));
  }
  setter.join();
}

TEST(CondVarTest, WaitWithoutPredicateReturnsWithTheLockHeld) {
  Counter c;
  MutexLock lock(&c.mu);
  // No notifier: the timed wait returns by its deadline (or spuriously), holding the lock.
  c.cv.WaitFor(lock, 5ms);
  c.value = 2;
  EXPECT_EQ(c.value, 2);
}

}  // namespace
}  // namespace hvd::base
