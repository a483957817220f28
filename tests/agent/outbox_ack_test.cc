// Outbox's rank events kept until the launcher acknowledges them (issue 22): numbered from 1,
// sent again first and in order after a reconnect, freed by an ack, bounded with RUNNING reports
// forgotten before exits, and not kept for a launcher that does not ack.
#include <gtest/gtest.h>

#include "agent/outbox.h"
#include "control/job_state_proto.h"
#include "tests/agent/outbox_test_util.h"

namespace hvd::agent {
namespace {

using Clock = Outbox::Clock;

using outboxtest::Event;

// The seqs of the rank events among `msgs`, in order.
std::vector<uint64_t> Seqs(const std::vector<hvd::v1::AgentMessage>& msgs) {
  std::vector<uint64_t> seqs;
  for (const auto& m : msgs) {
    if (m.has_rank_event()) seqs.push_back(m.rank_event().seq());
  }
  return seqs;
}

using V = std::vector<uint64_t>;

TEST(OutboxAckTest, EventsAreNumberedFromOne) {
  Outbox box;
  EXPECT_EQ(box.AddEvent(Event(0, hvd::v1::RANK_RUNNING)), 1u);
  EXPECT_EQ(box.AddEvent(Event(1, hvd::v1::RANK_RUNNING)), 2u);
  EXPECT_EQ(Seqs(box.Take(Clock::now(), false)), (V{1, 2}));
}

TEST(OutboxAckTest, WrittenButUnackedEventsGoFirstInOrderAfterAReconnect) {
  Outbox box;
  box.AddEvent(Event(0, hvd::v1::RANK_RUNNING));
  box.AddLine("j", 0, false, "out");
  box.AddEvent(Event(0, hvd::v1::RANK_EXITED));
  auto written = box.Take(Clock::now(), true);  // to a stream that then breaks
  ASSERT_EQ(written.size(), 3u);
  EXPECT_EQ(Seqs(written), (V{1, 2}));
  box.AddEvent(Event(1, hvd::v1::RANK_EXITED));  // while disconnected
  box.AddLine("j", 1, false, "later");
  EXPECT_FALSE(box.empty());
  box.Reconnected(/*acks=*/true);
  auto resent = box.Take(Clock::now(), false);
  // The old stream's events first, then what was queued, in its order; lines are not resent.
  ASSERT_EQ(resent.size(), 4u);
  EXPECT_EQ(Seqs(resent), (V{1, 2, 3}));
  EXPECT_EQ(resent[0].rank_event().state(), hvd::v1::RANK_RUNNING);
  EXPECT_EQ(resent[1].rank_event().state(), hvd::v1::RANK_EXITED);
  EXPECT_EQ(resent[3].output().lines(0).text(), "later");
  EXPECT_EQ(box.unacked(), 3u);

  box.Ack(2);  // 1 and 2 applied; 3's ack was lost with the stream
  EXPECT_EQ(box.unacked(), 1u);
  box.Reconnected(true);
  EXPECT_EQ(Seqs(box.Take(Clock::now(), false)), (V{3}));
  box.Ack(3);
  EXPECT_EQ(box.unacked(), 0u);
  EXPECT_TRUE(box.empty());
  box.Reconnected(true);
  EXPECT_TRUE(box.Take(Clock::now(), true).empty());
}

TEST(OutboxAckTest, AnAckedEventStillQueuedIsNotWritten) {
  Outbox box;
  box.AddEvent(Event(0, hvd::v1::RANK_EXITED));
  box.Take(Clock::now(), false);
  box.Reconnected(true);  // queued again, then the ack from the old stream's batch arrives
  box.Ack(1);
  EXPECT_TRUE(box.Take(Clock::now(), true).empty());
  EXPECT_TRUE(box.empty());
}

TEST(OutboxAckTest, AWriteThatFailsAfterTheReconnectDoesNotDuplicate) {
  Outbox box;
  box.AddEvent(Event(0, hvd::v1::RANK_EXITED));
  auto msgs = box.Take(Clock::now(), false);
  box.Reconnected(true);  // the connector registered again while the writer still wrote
  box.PutBack(msgs);      // to the old stream, in vain
  EXPECT_EQ(Seqs(box.Take(Clock::now(), false)), (V{1}));
  box.PutBack(msgs);  // a failed write before any reconnect: back in front, once
  box.Reconnected(true);
  EXPECT_EQ(Seqs(box.Take(Clock::now(), false)), (V{1}));
}

TEST(OutboxAckTest, BeyondTheBoundRunningReportsAreForgottenBeforeExits) {
  Outbox::Limits limits;
  limits.max_unacked_events = 3;
  Outbox box(limits);
  box.AddEvent(Event(0, hvd::v1::RANK_RUNNING));  // 1
  box.AddEvent(Event(0, hvd::v1::RANK_EXITED));   // 2
  box.AddEvent(Event(1, hvd::v1::RANK_RUNNING));  // 3
  box.AddEvent(Event(1, hvd::v1::RANK_KILLED));   // 4
  box.AddEvent(Event(2, hvd::v1::RANK_RUNNING));  // 5
  // Never dropped before it is written: all 5 go out.
  EXPECT_EQ(Seqs(box.Take(Clock::now(), false)), (V{1, 2, 3, 4, 5}));
  box.Take(Clock::now(), false);  // trims what the last Take wrote
  EXPECT_EQ(box.unacked(), 3u);
  box.Reconnected(true);
  EXPECT_EQ(Seqs(box.Take(Clock::now(), false)), (V{2, 4, 5}));

  // Two more beyond the bound: the RUNNING report 5 goes, then the oldest exit, 2.
  box.AddEvent(Event(3, hvd::v1::RANK_EXITED));  // 6
  box.AddEvent(Event(4, hvd::v1::RANK_EXITED));  // 7
  box.Take(Clock::now(), false);
  box.Take(Clock::now(), false);
  box.Reconnected(true);
  EXPECT_EQ(Seqs(box.Take(Clock::now(), false)), (V{4, 6, 7}));
}

TEST(OutboxAckTest, ALauncherThatDoesNotAckGetsOneResendAndNothingIsKept) {
  Outbox box;
  box.AddEvent(Event(0, hvd::v1::RANK_EXITED));
  box.AddEvent(Event(1, hvd::v1::RANK_EXITED));
  box.Take(Clock::now(), false);                 // 1, 2 written
  box.AddEvent(Event(2, hvd::v1::RANK_EXITED));  // 3 queued
  box.Reconnected(/*acks=*/false);
  EXPECT_EQ(Seqs(box.Take(Clock::now(), false)), (V{1, 2, 3}));
  EXPECT_EQ(box.unacked(), 0u);
  EXPECT_TRUE(box.empty());
  box.AddEvent(Event(3, hvd::v1::RANK_EXITED));
  EXPECT_EQ(Seqs(box.Take(Clock::now(), false)), (V{4}));  // still numbered
  box.Reconnected(false);
  EXPECT_TRUE(box.Take(Clock::now(), true).empty());
  box.Reconnected(true);  // a launcher that acks: kept again from here on
  box.AddEvent(Event(4, hvd::v1::RANK_EXITED));
  box.Take(Clock::now(), false);
  EXPECT_EQ(box.unacked(), 1u);
}

}  // namespace
}  // namespace hvd::agent
