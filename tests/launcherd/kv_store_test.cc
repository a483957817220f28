// KvStore: the launcher's in-memory rendezvous store (set/get/wait/add/cas, scopes, shutdown).
#include "launcherd/kv_store.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

namespace hvd::launcherd {
namespace {

using std::chrono::milliseconds;

TEST(KvStore, SetGetAndNotFound) {
  KvStore kv;
  std::string v;
  Status s = kv.Get("job/1/a", &v);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_NE(s.message().find("'job/1/a'"), std::string::npos) << s.message();
  ASSERT_TRUE(kv.Set("job/1/a", std::string("x\0y", 3)).ok());
  ASSERT_TRUE(kv.Get("job/1/a", &v).ok());
  EXPECT_EQ(v, std::string("x\0y", 3));  // values are bytes
  ASSERT_TRUE(kv.Set("job/1/a", "z").ok());
  ASSERT_TRUE(kv.Get("job/1/a", &v).ok());
  EXPECT_EQ(v, "z");
  KvStats st = kv.stats();
  EXPECT_EQ(st.sets, 2u);
  EXPECT_EQ(st.gets, 3u);
  EXPECT_EQ(st.keys, 1u);
}

TEST(KvStore, WaitTimesOutListingMissingKeys) {
  KvStore kv;
  ASSERT_TRUE(kv.Set("k/0", "v").ok());
  auto t0 = std::chrono::steady_clock::now();
  Status s = kv.Wait({"k/0", "k/1", "k/2"}, milliseconds(50));
  auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(s.message().find("timed out after 50 ms waiting for 2 keys: 'k/1', 'k/2'"),
            std::string::npos)
      << s.message();
  EXPECT_GE(took, milliseconds(50));
  EXPECT_LT(took, milliseconds(5000));
  EXPECT_TRUE(kv.Wait({"k/0"}, milliseconds(0)).ok());
  EXPECT_TRUE(kv.Wait({}, milliseconds(0)).ok());
  EXPECT_EQ(kv.Wait({"k/1"}, milliseconds(-5)).code(), StatusCode::kDeadlineExceeded);
}

TEST(KvStore, WaitWakesWhenTheLastKeyArrives) {
  KvStore kv;
  std::atomic<bool> done{false};
  Status result;
  std::thread waiter([&] {
    result = kv.Wait({"a", "b"}, milliseconds(20000));
    done = true;
  });
  ASSERT_TRUE(kv.Set("a", "1").ok());
  std::this_thread::sleep_for(milliseconds(20));
  EXPECT_FALSE(done.load());
  int64_t v = 0;
  ASSERT_TRUE(kv.Add("b", 1, &v).ok());  // an Add creates the key too
  waiter.join();
  EXPECT_TRUE(result.ok()) << result.ToString();
}

TEST(KvStore, AddCountsAndRejectsNonIntegers) {
  KvStore kv;
  int64_t v = 0;
  ASSERT_TRUE(kv.Add("n", 5, &v).ok());
  EXPECT_EQ(v, 5);
  ASSERT_TRUE(kv.Add("n", -7, &v).ok());
  EXPECT_EQ(v, -2);
  std::string text;
  ASSERT_TRUE(kv.Get("n", &text).ok());
  EXPECT_EQ(text, "-2");
  ASSERT_TRUE(kv.Set("s", "abc").ok());
  Status s = kv.Add("s", 1, &v);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("'s'"), std::string::npos) << s.message();
  ASSERT_TRUE(kv.Set("big", std::to_string(INT64_MAX)).ok());
  EXPECT_EQ(kv.Add("big", 1, &v).code(), StatusCode::kInvalidArgument);
}

TEST(KvStore, AddIsAtomicAcrossThreads) {
  KvStore kv;
  constexpr int kThreads = 8, kEach = 500;
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t) {
    ts.emplace_back([&] {
      for (int i = 0; i < kEach; ++i) ASSERT_TRUE(kv.Add("c", 1, nullptr).ok());
    });
  }
  for (auto& t : ts) t.join();
  std::string v;
  ASSERT_TRUE(kv.Get("c", &v).ok());
  EXPECT_EQ(v, std::to_string(kThreads * kEach));
  EXPECT_EQ(kv.stats().adds, static_cast<uint64_t>(kThreads * kEach));
}

TEST(KvStore, CompareAndSet) {
  KvStore kv;
  bool swapped = false, found = true;
  std::string cur = "junk";
  ASSERT_TRUE(kv.CompareAndSet("k", false, "x", "y", &swapped, &cur, &found).ok());
  EXPECT_FALSE(swapped);  // absent but expected "x"
  EXPECT_FALSE(found);
  EXPECT_EQ(cur, "");
  ASSERT_TRUE(kv.CompareAndSet("k", true, "", "first", &swapped, &cur, &found).ok());
  EXPECT_TRUE(swapped);
  EXPECT_TRUE(found);
  EXPECT_EQ(cur, "first");
  ASSERT_TRUE(kv.CompareAndSet("k", true, "", "second", &swapped, &cur, &found).ok());
  EXPECT_FALSE(swapped);  // present: expect_absent fails
  EXPECT_EQ(cur, "first");
  ASSERT_TRUE(kv.CompareAndSet("k", false, "wrong", "third", &swapped, &cur, &found).ok());
  EXPECT_FALSE(swapped);
  EXPECT_EQ(cur, "first");
  ASSERT_TRUE(kv.CompareAndSet("k", false, "first", "third", &swapped, &cur, &found).ok());
  EXPECT_TRUE(swapped);
  EXPECT_EQ(cur, "third");
  EXPECT_EQ(kv.stats().cas, 5u);
}

TEST(KvStore, CompareAndSetElectsExactlyOneWinner) {
  KvStore kv;
  std::atomic<int> winners{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < 8; ++t) {
    ts.emplace_back([&, t] {
      bool swapped = false, found = false;
      std::string cur;
      ASSERT_TRUE(
          kv.CompareAndSet("leader", true, "", std::to_string(t), &swapped, &cur, &found).ok());
      if (swapped) ++winners;
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(winners.load(), 1);
}

TEST(KvStore, EraseScopeDropsOnlyThatPrefix) {
  KvStore kv;
  for (const char* k : {"job/1/a", "job/1/attempt/0/host/0", "job/10/a", "job/2/a", "job/1"}) {
    ASSERT_TRUE(kv.Set(k, "v").ok());
  }
  kv.EraseScope("job/1/");
  std::string v;
  EXPECT_EQ(kv.Get("job/1/a", &v).code(), StatusCode::kNotFound);
  EXPECT_EQ(kv.Get("job/1/attempt/0/host/0", &v).code(), StatusCode::kNotFound);
  EXPECT_TRUE(kv.Get("job/10/a", &v).ok());
  EXPECT_TRUE(kv.Get("job/2/a", &v).ok());
  EXPECT_TRUE(kv.Get("job/1", &v).ok());
  EXPECT_EQ(kv.stats().keys, 3u);
}

TEST(KvStore, ShutdownWakesWaitersAndFailsLaterWaits) {
  KvStore kv;
  constexpr int kWaiters = 4;
  std::vector<Status> results(kWaiters);
  std::vector<std::thread> ts;
  for (int i = 0; i < kWaiters; ++i) {
    ts.emplace_back([&, i] { results[i] = kv.Wait({"never"}, milliseconds(60000)); });
  }
  std::this_thread::sleep_for(milliseconds(30));
  auto t0 = std::chrono::steady_clock::now();
  kv.Shutdown();
  for (auto& t : ts) t.join();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, milliseconds(5000));
  for (const Status& s : results) {
    EXPECT_EQ(s.code(), StatusCode::kCancelled) << s.ToString();
    EXPECT_NE(s.message().find("launcher is stopping"), std::string::npos) << s.message();
  }
  ASSERT_TRUE(kv.Set("now", "v").ok());
  EXPECT_EQ(kv.Wait({"now"}, milliseconds(60000)).code(), StatusCode::kCancelled);
}

}  // namespace
}  // namespace hvd::launcherd
