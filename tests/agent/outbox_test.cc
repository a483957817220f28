// Outbox: batching, ordering of lines and events, put-back, and the bound while disconnected.
#include "agent/outbox.h"

#include <gtest/gtest.h>

#include "control/job_state_proto.h"
#include "tests/agent/outbox_test_util.h"

namespace hvd::agent {
namespace {

using Ms = std::chrono::milliseconds;
using Clock = Outbox::Clock;

using outboxtest::Event;

TEST(OutboxTest, LinesWaitForTheFlushIntervalThenGoInOneBatchPerJob) {
  Outbox box({256, 1 << 20, Ms(50), 1 << 20});
  EXPECT_TRUE(box.Take(Clock::now(), false).empty());
  box.AddLine("j", 0, false, "a");
  box.AddLine("j", 1, true, "b");
  EXPECT_TRUE(box.Take(Clock::now(), false).empty());  // not due yet
  auto msgs = box.Take(Clock::now() + Ms(60), false);
  ASSERT_EQ(msgs.size(), 1u);
  const auto& batch = msgs[0].output();
  EXPECT_EQ(batch.job_id(), "j");
  ASSERT_EQ(batch.lines_size(), 2);
  EXPECT_EQ(batch.lines(0).text(), "a");
  EXPECT_FALSE(batch.lines(0).stderr());
  EXPECT_EQ(batch.lines(1).rank(), 1);
  EXPECT_TRUE(batch.lines(1).stderr());
  EXPECT_TRUE(box.empty());
}

TEST(OutboxTest, FullBatchesAreDueAtOnceAndSplitByCountAndBytes) {
  Outbox box({3, 10, Ms(1000), 1 << 20});
  for (int i = 0; i < 7; ++i) box.AddLine("j", 0, false, "x");
  auto msgs = box.Take(Clock::now(), false);
  ASSERT_EQ(msgs.size(), 3u);  // 3 + 3 + 1 lines
  EXPECT_EQ(msgs[0].output().lines_size(), 3);
  EXPECT_EQ(msgs[2].output().lines_size(), 1);
  box.AddLine("j", 0, false, "123456");
  box.AddLine("j", 0, false, "123456");  // 12 bytes > 10: due, and two batches
  msgs = box.Take(Clock::now(), false);
  EXPECT_EQ(msgs.size(), 2u);
}

TEST(OutboxTest, AnEventFlushesAtOnceAfterTheLinesBeforeIt) {
  Outbox box;
  box.AddEvent(Event(0, hvd::v1::RANK_RUNNING));
  box.AddLine("j", 0, false, "out");
  box.AddLine("k", 0, false, "other job");
  box.AddEvent(Event(0, hvd::v1::RANK_EXITED));
  auto msgs = box.Take(Clock::now(), false);
  ASSERT_EQ(msgs.size(), 4u);
  EXPECT_EQ(msgs[0].rank_event().state(), hvd::v1::RANK_RUNNING);
  EXPECT_EQ(msgs[1].output().job_id(), "j");
  EXPECT_EQ(msgs[2].output().job_id(), "k");
  EXPECT_EQ(msgs[3].rank_event().state(), hvd::v1::RANK_EXITED);
}

TEST(OutboxTest, PutBackGoesFirst) {
  Outbox box;
  box.AddEvent(Event(1, hvd::v1::RANK_RUNNING));
  auto msgs = box.Take(Clock::now(), false);
  box.AddEvent(Event(2, hvd::v1::RANK_RUNNING));
  box.PutBack(msgs);
  msgs = box.Take(Clock::now(), false);
  ASSERT_EQ(msgs.size(), 2u);
  EXPECT_EQ(msgs[0].rank_event().rank(), 1);
  EXPECT_EQ(msgs[1].rank_event().rank(), 2);
}

TEST(OutboxTest, OldestLinesAreDroppedBeyondTheBoundAndTheDropIsReported) {
  Outbox box({256, 1 << 20, Ms(50), 10});
  box.AddEvent(Event(0, hvd::v1::RANK_RUNNING));
  for (int i = 0; i < 5; ++i)
    box.AddLine("j", 0, false, std::string(1, 'l').append(std::to_string(i)));  // 2 bytes each
  box.AddLine("j", 0, false, "l5");
  box.AddLine("j", 0, false, "l6");
  auto msgs = box.Take(Clock::now(), true);
  ASSERT_EQ(msgs.size(), 3u);
  EXPECT_EQ(msgs[0].output().lines(0).text(),
            "[hvd-agent: 2 lines of output dropped: the launcher was unreachable or not keeping "
            "up]");
  EXPECT_EQ(msgs[1].rank_event().state(), hvd::v1::RANK_RUNNING);  // events are never dropped
  ASSERT_EQ(msgs[2].output().lines_size(), 5);
  EXPECT_EQ(msgs[2].output().lines(0).text(), "l2");
  EXPECT_EQ(msgs[2].output().lines(4).text(), "l6");
}

TEST(OutboxTest, WaitDueReturnsForEventsWakeAndDeadline) {
  Outbox box;
  auto t0 = Clock::now();
  box.WaitDue(t0 + Ms(30));
  EXPECT_GE(Clock::now() - t0, Ms(30));
  box.Wake();
  t0 = Clock::now();
  box.WaitDue(t0 + Ms(5000));
  EXPECT_LT(Clock::now() - t0, Ms(1000));
  box.AddLine("j", 0, false, "x");
  t0 = Clock::now();
  box.WaitDue(t0 + Ms(5000));  // due after the flush interval
  EXPECT_LT(Clock::now() - t0, Ms(1000));
}

}  // namespace
}  // namespace hvd::agent
