// Issue 20, finding 9: when an agent crashes (its stream drops), the ranks on other hosts die
// because their peers vanished, and their exits reach the launcher around the time the stream
// drop does. The job's cause must name the lost agent ("agent on node-b lost"), not "rank 0
// exited with code 1", whichever arrives first; an unrelated, older cause stands.
#include <gtest/gtest.h>

#include <thread>

#include "job_manager_fixture.h"
#include "testutil/expect.h"

namespace hvd::launcherd {
namespace {

class AgentLossCause : public JobManagerFixture {
 protected:
  // A 4-rank job on node-a (ranks 0, 1) and node-b (ranks 2, 3), every rank running.
  std::string RunningJob() {
    a_ = AddAgent("node-a", 2);
    b_ = AddAgent("node-b", 2);
    const std::string id = Submit(4, {{"node-a", 2}, {"node-b", 2}});
    for (int r = 0; r < 4; ++r) Event(r < 2 ? a_ : b_, id, r, RankState::kRunning);
    EXPECT_EQ(Get(id).state, JobState::kRunning);
    return id;
  }
  // node-b's agent crashed: its stream ended (what AgentGatewayService does then).
  void DropB() {
    registry_.Disconnected(Id(b_), b_.get());
    jobs_->OnAgentDisconnected(Id(b_));
  }
  void ExpectAgentCause(const JobStatus& st) {
    EXPECT_EQ(st.state, JobState::kFailed);
    ASSERT_TRUE(st.has_failure);
    EXPECT_EQ(st.failure.host, "node-b");
    EXPECT_EQ(st.failure.message.rfind("agent on node-b lost", 0), 0u) << st.failure.message;
    EXPECT_NE(st.failure.message.find("ranks 2, 3 ran there"), std::string::npos)
        << st.failure.message;
    EXPECT_EQ(st.reason.rfind("agent on node-b lost", 0), 0u) << st.reason;
  }

  std::shared_ptr<FakeLink> a_, b_;
};

TEST_F(AgentLossCause, RankDyingAfterTheDropNamesTheAgent) {
  const std::string id = RunningJob();
  DropB();
  EXPECT_EQ(Get(id).state, JobState::kRunning);  // a drop alone is not a failure: it may return
  Event(a_, id, 0, RankState::kExited, 1, 0, "connection reset by peer");
  ExpectAgentCause(Get(id));
}

TEST_F(AgentLossCause, DropReportedJustAfterTheRankExitReplacesTheCause) {
  const std::string id = RunningJob();
  Event(a_, id, 0, RankState::kExited, 1, 0, "connection reset by peer");
  EXPECT_EQ(Get(id).failure.message, "rank 0 on node-a exited with code 1");
  DropB();
  ExpectAgentCause(Get(id));
  // The lease running out later changes nothing more.
  AgentInfo lost;
  lost.id = Id(b_);
  lost.host = "node-b";
  jobs_->OnAgentLost(lost);
  ExpectAgentCause(Get(id));
  EXPECT_TRUE(Get(id).ranks[2].state == RankState::kKilled);
}

TEST_F(AgentLossCause, HeldPeerFailureBecomesTheAgentsLoss) {
  const std::string id = RunningJob();
  // Rank 0's runtime blamed a peer: its failure is held for the cause.
  jobs_->OnRendezvousKey("job/" + id + "/attempt/0/abort/0", "rank 2 closed the connection");
  Event(a_, id, 0, RankState::kExited, 1);
  EXPECT_EQ(Get(id).state, JobState::kRunning);
  DropB();
  ExpectAgentCause(Get(id));
}

TEST_F(AgentLossCause, OlderRankFailureStands) {
  JobManagerOptions o = Options();
  o.cause_settle = 50ms;
  Reset(o);
  const std::string id = RunningJob();
  Event(a_, id, 1, RankState::kExited, 3);
  std::this_thread::sleep_for(150ms);  // well past cause_settle: the drop is teardown, not cause
  DropB();
  const JobStatus st = Get(id);
  EXPECT_EQ(st.state, JobState::kFailed);
  EXPECT_EQ(st.failure.message, "rank 1 on node-a exited with code 3");
  EXPECT_EQ(st.exit_code, 3);
}

TEST_F(AgentLossCause, ReconnectedAgentIsNoCause) {
  const std::string id = RunningJob();
  DropB();
  // node-b's agent is back under its id (a network blip): a rank failure now is its own cause.
  AgentInfo info;
  info.id = Id(b_);
  info.host = "node-b";
  info.slots = 2;
  registry_.Register(info, std::make_shared<FakeLink>());
  Event(a_, id, 0, RankState::kExited, 2);
  EXPECT_EQ(Get(id).failure.message, "rank 0 on node-a exited with code 2");
}

// The lease ran out: the job's failure says how the agent went, as the launcher saw it. An open
// stream that went silent (a hung agent or host, a network dropping packets) reads differently
// from a connection that closed and never came back (the agent killed, the host down).
TEST_F(AgentLossCause, ALeaseRunningOutSaysWhetherTheConnectionStayedOpen) {
  const std::string id = RunningJob();
  const auto later = std::chrono::steady_clock::now() + 61s;  // past the fixture's 60 s lease
  std::vector<AgentInfo> lost = registry_.ExpireLeases(later);
  ASSERT_EQ(lost.size(), 2u);  // neither agent said anything since it registered
  for (const AgentInfo& a : lost) {
    EXPECT_HAS(a.lost_reason, "while its connection to the launcher stayed open");
    EXPECT_HAS(a.lost_reason, ", past the lease of 60.0 s (--lease-ms), ");
    EXPECT_HAS(a.lost_reason, "its host crashed, lost power or was cut off");
  }
  jobs_->OnAgentLost(lost[1].host == "node-b" ? lost[1] : lost[0]);
  const JobStatus st = Get(id);
  // (61 s and a few milliseconds: however long registering took)
  EXPECT_EQ(st.failure.message.rfind("agent on node-b lost (agent " + Id(b_) +
                                         ": it sent nothing "
                                         "for 61.",
                                     0),
            0u)
      << st.failure.message;
  EXPECT_HAS(st.failure.message, "(--lease-ms), while its connection to the launcher stayed open");
  EXPECT_EQ(registry_.List()[1].lost_reason, lost[1].lost_reason) << "kept for the listing";
}

TEST_F(AgentLossCause, ALeaseRunningOutAfterTheStreamClosedSaysSo) {
  RunningJob();
  DropB();
  std::vector<AgentInfo> lost = registry_.ExpireLeases(std::chrono::steady_clock::now() + 61s);
  ASSERT_EQ(lost.size(), 2u);
  const AgentInfo& b = lost[1].host == "node-b" ? lost[1] : lost[0];
  EXPECT_HAS(b.lost_reason, "its connection to the launcher closed, stayed closed for 61.");
  EXPECT_HAS(b.lost_reason, "s, and it sent nothing for 61.");
  EXPECT_HAS(b.lost_reason, "past the lease of 60.0 s (--lease-ms)");
  EXPECT_HAS(b.lost_reason, "the agent process ended (exited, killed)");
  // Registering again clears it: a reason from the agent itself is not taken either.
  AgentInfo info;
  info.id = Id(b_);
  info.host = "node-b";
  info.slots = 2;
  info.lost_reason = "made up by the agent";
  registry_.Register(info, std::make_shared<FakeLink>());
  for (const AgentInfo& a : registry_.List()) {
    if (a.id == Id(b_)) {
      EXPECT_EQ(a.lost_reason, "");
    }
  }
}

TEST_F(AgentLossCause, AnAgentARestartedLauncherExpectedAndNeverSawSaysSo) {
  AgentInfo gone;
  gone.id = "gone-1";
  gone.host = "node-c";
  registry_.Expect({gone});
  std::vector<AgentInfo> lost = registry_.ExpireLeases(std::chrono::steady_clock::now() + 121s);
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_HAS(lost[0].lost_reason, "it did not reconnect within 120.0 s of the launcher's restart");
}

}  // namespace
}  // namespace hvd::launcherd
