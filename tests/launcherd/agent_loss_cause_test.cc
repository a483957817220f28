// Issue 20, finding 9: when an agent crashes (its stream drops), the ranks on other hosts die
// because their peers vanished, and their exits reach the launcher around the time the stream
// drop does. The job's cause must name the lost agent ("agent on node-b lost"), not "rank 0
// exited with code 1", whichever arrives first; an unrelated, older cause stands.
#include <gtest/gtest.h>

#include <thread>

#include "job_manager_fixture.h"

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

}  // namespace
}  // namespace hvd::launcherd
