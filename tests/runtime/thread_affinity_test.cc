// --thread-affinity / HVD_THREAD_AFFINITY (Horovod's HOROVOD_THREAD_AFFINITY): one CPU per local
// rank for the background thread; parsing errors name the variable and entry; pinning is applied
// to the calling thread and checked with pthread_getaffinity_np.
#include "core/thread_affinity.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>

#include <map>
#include <thread>

#include "testutil/expect.h"

namespace hvd::runtime::core {
namespace {

TEST(ThreadAffinity, ParsesOneCpuPerLocalRank) {
  int cpu = 0;
  ASSERT_TRUE(ParseThreadAffinity("HVD_THREAD_AFFINITY", "", 0, 2, &cpu).ok());
  EXPECT_EQ(cpu, -1);
  ASSERT_TRUE(ParseThreadAffinity("HVD_THREAD_AFFINITY", "3, 1", 1, 2, &cpu).ok());
  EXPECT_EQ(cpu, 1);
  Status s = ParseThreadAffinity("HOROVOD_THREAD_AFFINITY", "0,x", 0, 2, &cpu);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_HAS(s.message(), "HOROVOD_THREAD_AFFINITY=0,x: entry 1 ('x')");
  s = ParseThreadAffinity("HVD_THREAD_AFFINITY", "0", 0, 2, &cpu);
  EXPECT_HAS(s.message(), "gives 1 CPU(s) but this host runs 2 ranks");
}

// The CPU this thread runs on alone, or -1 when it may run on several.
int OnlyCpu() {
  cpu_set_t set;
  CPU_ZERO(&set);
  pthread_getaffinity_np(pthread_self(), sizeof set, &set);
  if (CPU_COUNT(&set) != 1) return -1;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) return c;
  }
  return -1;
}

TEST(ThreadAffinity, PinsTheCallingThreadFromTheEnvironment) {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  ASSERT_EQ(sched_getaffinity(0, sizeof allowed, &allowed), 0);
  int last = -1;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &allowed)) last = c;
  }
  ASSERT_GE(last, 0);
  const std::string list = "0," + std::to_string(last);  // local rank 1 -> the last allowed CPU
  for (const char* variable : {"HVD_THREAD_AFFINITY", "HOROVOD_THREAD_AFFINITY"}) {
    std::map<std::string, std::string> env = {
        {variable, list}, {"HVD_LOCAL_RANK", "1"}, {"HVD_LOCAL_SIZE", "2"}};
    int pinned = -2, seen = -2;
    std::thread t([&] {
      pinned = PinBackgroundThread([&](const char* n) -> const char* {
        auto it = env.find(n);
        return it == env.end() ? nullptr : it->second.c_str();
      });
      seen = OnlyCpu();
    });
    t.join();
    EXPECT_EQ(pinned, last) << variable;
    EXPECT_EQ(seen, last) << variable;
  }
  // Unset, or wrong: nothing pinned, the thread keeps its affinity.
  int pinned = -2, seen = -2;
  std::thread t([&] {
    pinned = PinBackgroundThread([](const char* n) -> const char* {
      return std::string(n) == "HVD_THREAD_AFFINITY" ? "a,b" : nullptr;
    });
    seen = OnlyCpu();
  });
  t.join();
  EXPECT_EQ(pinned, -1);
  if (CPU_COUNT(&allowed) > 1) {
    EXPECT_EQ(seen, -1);
  }
}

}  // namespace
}  // namespace hvd::runtime::core
