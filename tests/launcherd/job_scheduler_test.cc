// Scheduler on its own (launcherd/job_scheduler.h): the placement step over a fixed set of agents,
// a held placement kept while it is valid and given up when it is not, and the steps to the
// start through a real AgentRegistry whose links record what they were sent. No JobManager.
#include "launcherd/job_scheduler.h"

#include <gtest/gtest.h>

#include <memory>

namespace hvd::launcherd {
namespace {

using namespace std::chrono_literals;

const Instant kT0{std::chrono::steady_clock::time_point(100s), 1'000'000};

class RecordingLink : public AgentLink {
 public:
  bool SendStartRank(const StartRankCommand& c) override {
    starts.push_back(c);
    return true;
  }
  bool SendStopJob(const StopJobCommand& c) override { return true; }
  bool SendMasterPort(const MasterPortCommand& c) override {
    asks.push_back(c);
    return true;
  }
  void Close() override {}
  std::vector<StartRankCommand> starts;
  std::vector<MasterPortCommand> asks;
};

control::AgentSlots Agent(const std::string& id, int slots, int64_t order) {
  control::AgentSlots a;
  a.id = id;
  a.host = "host-" + id;
  a.advertise_addr = "addr-" + id;
  a.slots = slots;
  a.order = order;
  return a;
}

std::unique_ptr<Job> PendingJob(int np) {
  auto job = std::make_unique<Job>(JobRules{}, 100, 1 << 20);
  job->status.id = "j1";
  job->status.spec.argv = {"./train"};
  job->status.spec.np = np;
  job->status.queued_since_ms = kT0.wall_ms;
  job->secret = "s3cret";
  return job;
}

std::vector<std::string> AgentsOf(const control::PlacementResult& r) {
  std::vector<std::string> out;
  for (const control::RankSlot& s : r.ranks) {
    out.push_back(s.agent_id + ":" + std::to_string(s.slot));
  }
  return out;
}

TEST(SchedulerPlaceStep, FirstFitOverTheAgentsSlots) {
  std::vector<control::AgentSlots> agents = {Agent("a", 2, 1), Agent("b", 2, 2)};
  auto job = PendingJob(3);
  control::PlacementResult r = Scheduler::PlaceStep(*job, agents);
  ASSERT_EQ(r.outcome, control::PlacementOutcome::kPlaced) << r.reason;
  EXPECT_EQ(AgentsOf(r), (std::vector<std::string>{"a:0", "a:1", "b:0"}));

  agents[0].busy = {0, 1};
  agents[1].busy = {0};
  EXPECT_EQ(Scheduler::PlaceStep(*job, agents).outcome, control::PlacementOutcome::kWait);
  auto huge = PendingJob(5);  // more agents may come
  EXPECT_EQ(Scheduler::PlaceStep(*huge, agents).outcome, control::PlacementOutcome::kWait);
  huge->status.spec.hosts = {{"host-a", 2}};  // never: the host list is too small
  EXPECT_EQ(Scheduler::PlaceStep(*huge, agents).outcome, control::PlacementOutcome::kNeverFits);
}

TEST(SchedulerPlaceStep, AHeldPlacementIsKeptWhileItIsValid) {
  std::vector<control::AgentSlots> agents = {Agent("a", 2, 1), Agent("b", 2, 2)};
  auto job = PendingJob(2);
  // Held on b (placed before a had room): a fresh placement would choose a, the held one stays.
  job->placing.emplace();
  job->placing->placement = Scheduler::PlaceStep(*job, {Agent("b", 2, 2)});
  ASSERT_EQ(AgentsOf(job->placing->placement), (std::vector<std::string>{"b:0", "b:1"}));
  EXPECT_EQ(AgentsOf(Scheduler::PlaceStep(*job, agents)), (std::vector<std::string>{"b:0", "b:1"}));
  // A slot of it taken, or its agent gone: placed afresh.
  agents[1].busy = {1};
  EXPECT_EQ(AgentsOf(Scheduler::PlaceStep(*job, agents)), (std::vector<std::string>{"a:0", "a:1"}));
  agents[1].busy.clear();
  EXPECT_TRUE(Scheduler::StillValid(job->placing->placement, agents));
  agents.pop_back();
  EXPECT_FALSE(Scheduler::StillValid(job->placing->placement, agents));
  EXPECT_EQ(AgentsOf(Scheduler::PlaceStep(*job, agents)), (std::vector<std::string>{"a:0", "a:1"}));
}

class SchedulerTest : public ::testing::Test {
 protected:
  SchedulerTest() : registry_(60s) {}
  std::shared_ptr<RecordingLink> Register(const std::string& host, int slots) {
    auto link = std::make_shared<RecordingLink>();
    AgentInfo info;
    info.host = host;
    info.advertise_addr = "addr-" + host;
    info.slots = slots;
    ids_[host] = registry_.Register(info, link);
    return link;
  }
  std::vector<std::shared_ptr<Job>> jobs_;
  AgentRegistry registry_;
  std::map<std::string, std::string> ids_;
};

TEST_F(SchedulerTest, StartsAPlacedJobWithEachRanksEnvironment) {
  auto link = Register("h0", 2);
  Scheduler scheduler({"10.0.0.1:7071", 30s, 0ms, nullptr}, &registry_);
  auto job = PendingJob(2);
  job->status.spec.gpu_isolation = true;
  Scheduler::Pass pass = scheduler.BeginPass(jobs_);
  EXPECT_EQ(scheduler.Advance(*job, &pass, kT0), Scheduler::Outcome::kStarted);
  EXPECT_EQ(job->state(), JobState::kStarting);
  EXPECT_FALSE(job->placing.has_value());
  EXPECT_EQ(pass.busy[ids_["h0"]], (std::set<int>{0, 1}));  // a later job in the pass sees them
  ASSERT_EQ(link->starts.size(), 2u);
  for (const StartRankCommand& c : link->starts) {
    EXPECT_EQ(c.job_id, "j1");
    EXPECT_EQ(c.env.at("HVD_SIZE"), "2");
    EXPECT_EQ(c.env.at("HVD_START_TIMEOUT_SECONDS"), "40");
    EXPECT_TRUE(c.gpu_isolation);  // --gpu-isolation reaches every rank's agent
  }
  EXPECT_EQ(job->status.ranks[1].state, RankState::kStarting);
  // No slot left for another.
  auto second = PendingJob(1);
  EXPECT_EQ(scheduler.Advance(*second, &pass, kT0), Scheduler::Outcome::kWaiting);
  EXPECT_EQ(second->state(), JobState::kPending);
}

TEST_F(SchedulerTest, TheMasterPortStepKeepsThePlacementUntilTheAnswer) {
  auto link = Register("h0", 1);
  Scheduler scheduler({"10.0.0.1:7071", 30s, 1000ms, nullptr}, &registry_);
  auto job = PendingJob(1);
  Scheduler::Pass pass = scheduler.BeginPass(jobs_);
  EXPECT_EQ(scheduler.Advance(*job, &pass, kT0), Scheduler::Outcome::kWaiting);
  EXPECT_EQ(job->status.reason, "choosing MASTER_PORT on h0");
  ASSERT_TRUE(job->placing.has_value());
  EXPECT_EQ(job->placing->since_ms, kT0.wall_ms);
  ASSERT_EQ(link->asks.size(), 1u);
  EXPECT_EQ(job->placing->master_port.deadline, kT0.steady + 1000ms);

  // A pass before the answer asks nothing again.
  pass = scheduler.BeginPass(jobs_);
  EXPECT_EQ(scheduler.Advance(*job, &pass, kT0), Scheduler::Outcome::kWaiting);
  EXPECT_EQ(link->asks.size(), 1u);
  EXPECT_EQ(scheduler.OnMasterPort(*job, ids_["h0"], {"other", 1, ""}, kT0),
            Scheduler::Answer::kNotThisJob);
  EXPECT_EQ(scheduler.OnMasterPort(*job, ids_["h0"], {link->asks[0].request_id, 29500, ""}, kT0),
            Scheduler::Answer::kTaken);
  pass = scheduler.BeginPass(jobs_);
  EXPECT_EQ(scheduler.Advance(*job, &pass, kT0), Scheduler::Outcome::kStarted);
  ASSERT_EQ(link->starts.size(), 1u);
  EXPECT_EQ(link->starts[0].env.at("MASTER_PORT"), "29500");
}

TEST_F(SchedulerTest, FallingBackToWaitingGivesThePlacementUpAndStopsTheQueueClock) {
  auto link = Register("h0", 1);
  Scheduler scheduler({"10.0.0.1:7071", 30s, 1000ms, nullptr}, &registry_);
  auto job = PendingJob(1);
  Scheduler::Pass pass = scheduler.BeginPass(jobs_);
  ASSERT_EQ(scheduler.Advance(*job, &pass, kT0), Scheduler::Outcome::kWaiting);
  ASSERT_TRUE(job->placing.has_value());
  registry_.Disconnected(ids_["h0"], link.get());  // no longer schedulable
  const Instant later{kT0.steady + 700ms, kT0.wall_ms + 700};
  pass = scheduler.BeginPass(jobs_);
  EXPECT_EQ(scheduler.Advance(*job, &pass, later), Scheduler::Outcome::kWaiting);
  EXPECT_FALSE(job->placing.has_value());
  EXPECT_EQ(job->status.queued_since_ms, kT0.wall_ms + 700);  // the 700 ms placed do not count
  EXPECT_EQ(job->status.reason.find("MASTER_PORT"), std::string::npos) << job->status.reason;
}

const control::AgentSlots* AgentIn(const Scheduler::Pass& pass, const std::string& id) {
  for (const control::AgentSlots& a : pass.agents) {
    if (a.id == id) return &a;
  }
  return nullptr;
}

// Issue 22: the pass is built once (live ranks' slots filled into its agents) and kept current as
// jobs start, never rebuilt for each job: rebuilding it per job held the launcher's lock for the
// whole of its time at 1,000 agents, and agents' MASTER_PORT answers waited past the deadline.
TEST_F(SchedulerTest, APassIsBuiltOnceAndKeptCurrentAsJobsStart) {
  Register("h0", 2);
  Register("h1", 2);
  Scheduler scheduler({"10.0.0.1:7071", 30s, 0ms, nullptr}, &registry_);
  auto live = std::shared_ptr<Job>(PendingJob(1));
  RankStatus r;
  r.placement.agent_id = ids_["h0"];
  r.placement.host = "h0";
  r.placement.slot = 0;
  r.state = RankState::kRunning;
  live->status.ranks.push_back(r);
  jobs_.push_back(live);

  Scheduler::Pass pass = scheduler.BeginPass(jobs_);
  ASSERT_NE(AgentIn(pass, ids_["h0"]), nullptr);
  EXPECT_EQ(AgentIn(pass, ids_["h0"])->busy, (std::set<int>{0}));  // filled in once, here
  EXPECT_TRUE(AgentIn(pass, ids_["h1"])->busy.empty());

  auto a = PendingJob(2);
  ASSERT_EQ(scheduler.Advance(*a, &pass, kT0), Scheduler::Outcome::kStarted);
  EXPECT_EQ(AgentIn(pass, ids_["h0"])->busy, (std::set<int>{0, 1}));
  EXPECT_EQ(AgentIn(pass, ids_["h1"])->busy, (std::set<int>{0}));
  auto b = PendingJob(1);
  ASSERT_EQ(scheduler.Advance(*b, &pass, kT0), Scheduler::Outcome::kStarted);
  EXPECT_EQ(b->status.ranks[0].placement.agent_id, ids_["h1"]);
  EXPECT_EQ(b->status.ranks[0].placement.slot, 1);
  auto c = PendingJob(1);
  EXPECT_EQ(scheduler.Advance(*c, &pass, kT0), Scheduler::Outcome::kWaiting);
}

// Jobs of one size share the pass's first fit while none starts; a start makes the next job
// place afresh on what is left (its held placement is no longer valid).
TEST_F(SchedulerTest, TheSharedFirstFitIsRedoneAfterAStart) {
  auto link = Register("h0", 2);
  Scheduler scheduler({"10.0.0.1:7071", 30s, 1000ms, nullptr}, &registry_);
  auto x = PendingJob(1);
  auto y = PendingJob(1);
  Scheduler::Pass pass = scheduler.BeginPass(jobs_);
  ASSERT_EQ(scheduler.Advance(*x, &pass, kT0), Scheduler::Outcome::kWaiting);
  ASSERT_EQ(scheduler.Advance(*y, &pass, kT0), Scheduler::Outcome::kWaiting);
  EXPECT_EQ(AgentsOf(x->placing->placement), AgentsOf(y->placing->placement));
  ASSERT_EQ(link->asks.size(), 2u);
  ASSERT_EQ(scheduler.OnMasterPort(*x, ids_["h0"], {link->asks[0].request_id, 29500, ""}, kT0),
            Scheduler::Answer::kTaken);
  pass = scheduler.BeginPass(jobs_);
  ASSERT_EQ(scheduler.Advance(*x, &pass, kT0), Scheduler::Outcome::kStarted);
  ASSERT_EQ(scheduler.Advance(*y, &pass, kT0), Scheduler::Outcome::kWaiting);
  EXPECT_EQ(AgentsOf(y->placing->placement), (std::vector<std::string>{ids_["h0"] + ":1"}));
}

TEST_F(SchedulerTest, AJobThatCanNeverFitFailsForGood) {
  Register("h0", 1);
  Scheduler scheduler({"10.0.0.1:7071", 30s, 0ms, nullptr}, &registry_);
  auto job = PendingJob(1);
  job->status.spec.max_restarts = 3;
  job->status.spec.hosts = {{"nowhere", 1}};
  Scheduler::Pass pass = scheduler.BeginPass(jobs_);
  // A host list naming a host that is not there waits for it; one that asks too much never fits.
  EXPECT_EQ(scheduler.Advance(*job, &pass, kT0), Scheduler::Outcome::kWaiting);
  auto big = PendingJob(3);
  big->status.spec.max_restarts = 3;
  big->status.spec.hosts = {{"h0", 1}};
  EXPECT_EQ(scheduler.Advance(*big, &pass, kT0), Scheduler::Outcome::kFailed);
  EXPECT_EQ(big->state(), JobState::kFailed);  // no restart: placing again would not help
  EXPECT_EQ(big->status.failure.message.rfind("cannot place the job: ", 0), 0u);
}

}  // namespace
}  // namespace hvd::launcherd
