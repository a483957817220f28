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

class MasterPortTest : public JobManagerFixture {
 protected:
  MasterPortTest() {
    JobManagerOptions o = Options();
    o.master_port_timeout = 100ms;
    Reset(o);
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
  std::this_thread::sleep_for(150ms);
  jobs_->Tick();
  JobStatus st = Get(id);
  EXPECT_EQ(st.state, JobState::kFailed);
  EXPECT_HAS(st.failure.message,
             "rank 0's agent " + Id(a) + " on h0 did not choose MASTER_PORT within 0.1 s");
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

}  // namespace
}  // namespace hvd::launcherd
