// StdinRelay: bounded per job (a writer waits while it is full), EOF after the data, the newest
// attempt's reader wins, Drop and Prune free a job's buffer and wake whoever waits on it.
#include "launcherd/stdin_relay.h"

#include <gtest/gtest.h>

#include <thread>

#include "testutil/expect.h"

namespace hvd::launcherd {
namespace {

using std::chrono::milliseconds;

TEST(StdinRelay, DataThenEndOfInput) {
  StdinRelay relay(1024);
  ASSERT_TRUE(relay.Write("j", "hello ", milliseconds(0)).ok());
  ASSERT_TRUE(relay.Write("j", "world", milliseconds(0)).ok());
  relay.Close("j");
  std::string data;
  bool eof = false;
  ASSERT_TRUE(relay.Read("j", 0, 4, milliseconds(0), &data, &eof).ok());
  EXPECT_EQ(data, "hell");
  EXPECT_FALSE(eof);
  ASSERT_TRUE(relay.Read("j", 0, 100, milliseconds(0), &data, &eof).ok());
  EXPECT_EQ(data, "o world");
  ASSERT_TRUE(relay.Read("j", 0, 100, milliseconds(0), &data, &eof).ok());
  EXPECT_EQ(data, "");
  EXPECT_TRUE(eof);
  EXPECT_EQ(relay.Write("j", "late", milliseconds(0)).code(), StatusCode::kFailedPrecondition);
}

TEST(StdinRelay, AFullBufferHoldsTheWriterUntilTheReaderTakes) {
  StdinRelay relay(8);
  ASSERT_TRUE(relay.Write("j", std::string(8, 'a'), milliseconds(0)).ok());
  // Full: the writer waits its time and is told to come back.
  EXPECT_EQ(relay.Write("j", "b", milliseconds(20)).code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(relay.buffered("j"), 8u);
  Status written;
  std::thread writer([&] { written = relay.Write("j", "b", milliseconds(5000)); });
  std::string data;
  bool eof;
  ASSERT_TRUE(relay.Read("j", 0, 3, milliseconds(0), &data, &eof).ok());
  writer.join();  // woken by the read, long before its 5 s
  EXPECT_TRUE(written.ok()) << written.message();
  EXPECT_EQ(relay.buffered("j"), 6u);
  // Nothing to read yet: the reader is told to come back.
  StdinRelay empty;
  EXPECT_EQ(empty.Read("k", 0, 10, milliseconds(10), &data, &eof).code(),
            StatusCode::kDeadlineExceeded);
}

TEST(StdinRelay, TheNewestAttemptReads) {
  StdinRelay relay;
  std::string data;
  bool eof;
  Status old_reader;
  std::thread t([&] { old_reader = relay.Read("j", 0, 10, milliseconds(5000), &data, &eof); });
  std::this_thread::sleep_for(milliseconds(20));
  std::string mine;
  EXPECT_EQ(relay.Read("j", 1, 10, milliseconds(0), &mine, &eof).code(),
            StatusCode::kDeadlineExceeded);
  t.join();  // attempt 1 took over: attempt 0's waiting read ends at once
  EXPECT_EQ(old_reader.code(), StatusCode::kAborted);
  ASSERT_TRUE(relay.Write("j", "x", milliseconds(0)).ok());
  EXPECT_EQ(relay.Read("j", 0, 10, milliseconds(0), &data, &eof).code(), StatusCode::kAborted);
  ASSERT_TRUE(relay.Read("j", 1, 10, milliseconds(0), &mine, &eof).ok());
  EXPECT_EQ(mine, "x");
}

TEST(StdinRelay, DropAndPruneFreeTheJobAndWakeWaiters) {
  StdinRelay relay(4);
  ASSERT_TRUE(relay.Write("j", "full", milliseconds(0)).ok());
  Status blocked;
  std::thread writer([&] { blocked = relay.Write("j", "more", milliseconds(5000)); });
  std::this_thread::sleep_for(milliseconds(20));
  relay.Drop("j");
  writer.join();
  EXPECT_EQ(blocked.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(relay.buffered("j"), 0u);
  EXPECT_TRUE(relay.Drained("j"));

  ASSERT_TRUE(relay.Write("live", "a", milliseconds(0)).ok());
  std::string data;
  bool eof;
  Status reader;
  std::thread r([&] { reader = relay.Read("gone", 0, 10, milliseconds(5000), &data, &eof); });
  // The reader made "gone"'s entry under the lock it waits with: once it is listed (beside "j"
  // and "live"), it waits.
  for (int i = 0; i < 2000 && relay.jobs() < 3; ++i) std::this_thread::sleep_for(milliseconds(1));
  relay.Prune([](const std::string& job) { return job != "live"; });
  r.join();
  EXPECT_EQ(reader.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(relay.jobs(), 1u);
  EXPECT_EQ(relay.buffered("live"), 1u);
}

}  // namespace
}  // namespace hvd::launcherd
