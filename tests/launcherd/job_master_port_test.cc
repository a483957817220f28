// MASTER_PORT between placement and start (launcherd/job_master_port.cc): the job waits while rank
// 0's agent chooses the port, every rank then gets it with MASTER_ADDR and torchrun's node
// numbers, and an agent that fails or stays silent fails the job naming it.
#include "tests/launcherd/job_manager_fixture.h"

#include <thread>

#include "testutil/expect.h"

namespace hvd::launcherd {
namespace {

class PortLink : public FakeLink {
 public:
  bool SendMasterPort(const MasterPortCommand& c) override {
    std::lock_guard<std::mutex> lock(mu);
    asks.push_back(c);
    return true;
  }
  std::vector<MasterPortCommand> asks;
};

// The agents' deadline: long enough that no Tick of a test comes after it by accident on a slow
// machine, short enough to sleep past where a test needs it passed.
constexpr auto kPortTimeout = 1000ms;
constexpr auto kPastTheDeadline = kPortTimeout + 200ms;

class MasterPortTest : public JobManagerFixture {
 protected:
  MasterPortTest() {
    JobManagerOptions o = Options();
    o.master_port_timeout = kPortTimeout;
    Reset(o);
  }
  // The agent's stream ended (as AgentGateway reports it).
  void Disconnect(const std::shared_ptr<PortLink>& link) {
    registry_.Disconnected(Id(link), link.get());
    jobs_->OnAgentDisconnected(Id(link));
  }
  std::shared_ptr<PortLink> Agent(const std::string& host, int slots) {
    return AddAgent<PortLink>(host, slots);
  }
  void Answer(const std::shared_ptr<PortLink>& link, int port, const std::string& error = "") {
    ASSERT_FALSE(link->asks.empty());
    jobs_->OnMasterPort(Id(link), {link->asks.back().request_id, port, error});
  }
};

TEST_F(MasterPortTest, RankZerosAgentChoosesThenEveryRankGetsIt) {
  auto a = Agent("h0", 2);
  auto b = Agent("h1", 2);
  const std::string id = Submit(4, {{"h0", 2}, {"h1", 2}});
  JobStatus st = Get(id);
  EXPECT_EQ(st.state, JobState::kPending);
  EXPECT_EQ(st.reason, "choosing MASTER_PORT on h0");
  ASSERT_EQ(a->asks.size(), 1u);
  EXPECT_EQ(a->asks[0].job_id, id);
  EXPECT_TRUE(b->asks.empty());
  EXPECT_TRUE(a->starts.empty());

  // An answer to another request, or from another agent, changes nothing.
  jobs_->OnMasterPort(Id(a), {"not-it", 1, ""});
  jobs_->OnMasterPort(Id(b), {a->asks[0].request_id, 1, ""});
  EXPECT_TRUE(a->starts.empty());

  Answer(a, 29411);
  ASSERT_EQ(a->starts.size(), 2u);
  ASSERT_EQ(b->starts.size(), 2u);
  for (const auto& link : {a, b}) {
    for (const StartRankCommand& c : link->starts) {
      SCOPED_TRACE(c.placement.rank);
      EXPECT_EQ(c.env.at("MASTER_PORT"), "29411");
      EXPECT_EQ(c.env.at("MASTER_ADDR"), "addr-h0");  // rank 0's, as the others reach it
      EXPECT_EQ(c.env.at("GROUP_RANK"), c.placement.rank < 2 ? "0" : "1");
      EXPECT_EQ(c.env.at("GROUP_WORLD_SIZE"), "2");
      EXPECT_EQ(c.env.at("TORCHELASTIC_RUN_ID"), id);
    }
  }
  EXPECT_EQ(Get(id).state, JobState::kStarting);
}

TEST_F(MasterPortTest, OneAgentMeetsOverLoopback) {
  auto a = Agent("h0", 2);
  Submit(2);
  Answer(a, 20001);
  ASSERT_EQ(a->starts.size(), 2u);
  EXPECT_EQ(a->starts[0].env.at("MASTER_ADDR"), "127.0.0.1");
  EXPECT_EQ(a->starts[1].env.at("MASTER_PORT"), "20001");
}

TEST_F(MasterPortTest, JobsOwnMasterPortIsNotAskedFor) {
  auto a = Agent("h0", 1);
  JobSpec spec = Spec(1);
  spec.env["MASTER_PORT"] = "1234";
  Submit(spec);
  EXPECT_TRUE(a->asks.empty());
  ASSERT_EQ(a->starts.size(), 1u);
  EXPECT_EQ(a->starts[0].env.at("MASTER_PORT"), "1234");
}

TEST_F(MasterPortTest, AgentWithoutAPortFailsTheJobNamingIt) {
  auto a = Agent("h0", 1);
  const std::string id = Submit(1);
  Answer(a, 0, "no free TCP port for MASTER_PORT after 64 tries");
  JobStatus st = Get(id);
  EXPECT_EQ(st.state, JobState::kFailed);
  EXPECT_HAS(st.failure.message, "rank 0's agent on h0 could not choose MASTER_PORT: no free TCP");
  EXPECT_TRUE(a->starts.empty());
}

TEST_F(MasterPortTest, SilentAgentFailsTheJobAtTheDeadline) {
  auto a = Agent("h0", 1);
  const std::string id = Submit(1);
  jobs_->Tick();
  EXPECT_EQ(Get(id).state, JobState::kPending);  // not yet
  std::this_thread::sleep_for(kPastTheDeadline);
  jobs_->Tick();
  JobStatus st = Get(id);
  EXPECT_EQ(st.state, JobState::kFailed);
  EXPECT_HAS(st.failure.message,
             "rank 0's agent " + Id(a) + " on h0 did not choose MASTER_PORT within 1.0 s");
  EXPECT_HAS(st.failure.message, "-x MASTER_PORT=N");
  Answer(a, 20001);  // too late: ignored
  EXPECT_TRUE(a->starts.empty());
}

TEST_F(MasterPortTest, AgentThatCannotCarryTheRequestFailsTheJob) {
  AddAgent("h0", 1);  // a plain FakeLink refuses SendMasterPort, as a closed stream does
  const std::string id = Submit(1);
  JobStatus st = Get(id);
  EXPECT_EQ(st.state, JobState::kFailed);
  EXPECT_HAS(st.failure.message, "disconnected before it chose MASTER_PORT");
}

// Rank 0's agent goes away after it was asked: no answer can come, and the job is placed again
// (here: it waits for slots) instead of failing at the deadline for the agent's "silence".
TEST_F(MasterPortTest, AgentGoneAfterTheRequestIsNotBlamedForIt) {
  auto a = Agent("h0", 1);
  const std::string id = Submit(1);
  ASSERT_EQ(a->asks.size(), 1u);
  Disconnect(a);
  jobs_->Tick();
  JobStatus st = Get(id);
  EXPECT_EQ(st.state, JobState::kPending);
  EXPECT_EQ(st.reason.find("MASTER_PORT"), std::string::npos) << st.reason;  // waits for slots
  std::this_thread::sleep_for(kPastTheDeadline);
  jobs_->Tick();
  EXPECT_EQ(Get(id).state, JobState::kPending) << Get(id).failure.message;
  // Another agent: asked afresh, and the job starts there.
  auto b = Agent("h1", 1);
  ASSERT_EQ(b->asks.size(), 1u);
  Answer(b, 20002);
  ASSERT_EQ(b->starts.size(), 1u);
  EXPECT_EQ(b->starts[0].env.at("MASTER_PORT"), "20002");
  EXPECT_TRUE(a->starts.empty());
}

// The job falls back to waiting for slots (another of its hosts went away) while rank 0's agent,
// still there, was asked: the request is dropped, not failed later, and asked again once placed.
TEST_F(MasterPortTest, FallingBackToWaitingDropsTheRequest) {
  auto a = Agent("h0", 1);
  auto b = Agent("h1", 1);
  const std::string id = Submit(2, {{"h0", 1}, {"h1", 1}});
  ASSERT_EQ(a->asks.size(), 1u);
  Disconnect(b);
  jobs_->Schedule();  // any event: the job cannot be placed any more
  EXPECT_EQ(Get(id).state, JobState::kPending);
  std::this_thread::sleep_for(kPastTheDeadline);
  jobs_->Tick();
  EXPECT_EQ(Get(id).state, JobState::kPending) << Get(id).failure.message;
  Answer(a, 20003);  // the dropped request's answer starts nothing
  EXPECT_TRUE(a->starts.empty());
  auto b2 = Agent("h1", 1);  // h1 is back: placed again, rank 0's agent asked again
  ASSERT_EQ(a->asks.size(), 2u);
  EXPECT_NE(a->asks[1].request_id, a->asks[0].request_id);
  Answer(a, 20004);
  ASSERT_EQ(a->starts.size(), 1u);
  ASSERT_EQ(b2->starts.size(), 1u);
  EXPECT_EQ(b2->starts[0].env.at("MASTER_PORT"), "20004");
}

// --queue-timeout is the time waiting for slots: a placed job waiting for its MASTER_PORT is
// not "waiting for slots", however long the agent takes within its deadline.
TEST_F(MasterPortTest, QueueTimeoutDoesNotCountTheMasterPortStep) {
  auto a = Agent("h0", 1);
  JobSpec spec = Spec(1);
  spec.queue_timeout_ms = 300;
  const std::string id = Submit(spec);
  ASSERT_EQ(a->asks.size(), 1u);
  std::this_thread::sleep_for(500ms);
  jobs_->Tick();
  JobStatus st = Get(id);
  EXPECT_EQ(st.state, JobState::kPending) << st.failure.message;
  Answer(a, 20005);
  EXPECT_EQ(a->starts.size(), 1u);
  EXPECT_EQ(Get(id).state, JobState::kStarting);
}

}  // namespace
}  // namespace hvd::launcherd
