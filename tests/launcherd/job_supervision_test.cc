// JobManager's supervision: the start timeout, a rank that left before hvd::Init(), stall reports
// and the stall timeout, the attached client's lease, and restarts. Timers run on Tick(), driven
// here after short real waits.
#include <gtest/gtest.h>

#include <thread>

#include "tests/launcherd/job_manager_fixture.h"
#include "testutil/expect.h"

namespace hvd::launcherd {
namespace {

class JobSupervision : public JobManagerFixture {
 protected:
  JobSupervision() {
    JobManagerOptions o = Options();
    o.client_lease = 24h;  // only the test about it shortens it
    Reset(o);
  }
  // A job on one agent with every rank RUNNING.
  std::string Running(JobSpec spec) {
    spec.detached = true;
    const std::string id = Submit(spec);
    for (int r = 0; r < spec.np; ++r) Event(agent_, id, r, RankState::kRunning);
    EXPECT_EQ(Get(id).state, JobState::kRunning);
    return id;
  }
  void AtRendezvous(const std::string& id, int rank, int attempt = 0) {
    jobs_->OnRendezvousKey(
        "job/" + id + "/attempt/" + std::to_string(attempt) + "/host/" + std::to_string(rank),
        "3\nh1");
  }
  void Stall(const std::string& id, int rank, const std::string& value) {
    jobs_->OnRendezvousKey("job/" + id + "/attempt/0/stall/" + std::to_string(rank), value);
  }
  std::shared_ptr<FakeLink> agent_ = AddAgent("h1", 4);
};

TEST_F(JobSupervision, StartTimeoutNamesEachMissingRankAndWhy) {
  JobSpec spec = Spec(3);
  spec.start_timeout_ms = 100;
  spec.detached = true;
  const std::string id = Submit(spec);
  Event(agent_, id, 0, RankState::kRunning);
  Event(agent_, id, 1, RankState::kRunning);  // rank 2: its agent never says
  AtRendezvous(id, 0);
  jobs_->Tick();
  EXPECT_EQ(Get(id).state, JobState::kStarting);  // not yet
  std::this_thread::sleep_for(150ms);
  jobs_->Tick();
  const JobStatus st = Get(id);
  EXPECT_EQ(st.state, JobState::kFailed);
  ASSERT_TRUE(st.has_failure);
  EXPECT_EQ(st.failure.rank, 1);
  EXPECT_EQ(st.failure.host, "h1");
  EXPECT_HAS(st.failure.message, "ranks 1, 2 did not reach the rendezvous within 0.1 s");
  EXPECT_HAS(st.failure.message,
             "rank 1 on h1: running as pid 1001 but never called hvd.init() (hvd::Init())");
  EXPECT_HAS(st.failure.message,
             "rank 2 on h1: its agent " + Id(agent_) + " never reported it started");
  // Rank 0 called hvd.init(): no hint that the program may not use hvd.
  EXPECT_EQ(st.failure.message.find("--start-timeout 0"), std::string::npos) << st.failure.message;
  EXPECT_EQ(st.exit_code, 1);
  // Every rank is told to stop.
  ASSERT_EQ(agent_->stops.size(), 1u);
  EXPECT_EQ(agent_->stops[0].job_id, id);
}

TEST_F(JobSupervision, RanksAtTheRendezvousDisarmTheStartTimeout) {
  JobSpec spec = Spec(2);
  spec.start_timeout_ms = 50;
  const std::string id = Running(spec);
  AtRendezvous(id, 0);
  AtRendezvous(id, 1);
  AtRendezvous(id, 1);  // a repeated key changes nothing
  AtRendezvous(id, 7);  // no such rank: ignored
  jobs_->OnRendezvousKey("job/" + id + "/attempt/0/init/1/host/0", "x");  // a re-Init: ignored
  std::this_thread::sleep_for(80ms);
  jobs_->Tick();
  const JobStatus st = Get(id);
  EXPECT_EQ(st.state, JobState::kRunning);
  EXPECT_GT(st.ranks[0].rendezvous_time_ms, 0);
  EXPECT_GT(st.ranks[1].rendezvous_time_ms, 0);
}

// A rank that exits 0 without calling hvd::Init() while another waits for it at the rendezvous is
// named at the next tick, whichever came first, with no start timeout at all: the waiting rank
// was left to its own start timeout (40 s) and then blamed. Without a rank at the rendezvous (a
// program without hvd) an exit 0 is only a rank that finished.
TEST_F(JobSupervision, ARankThatLeftBeforeInitIsNamedWhileOthersWait) {
  JobSpec spec = Spec(3);
  spec.start_timeout_ms = 0;
  const std::string early = Running(spec);
  Event(agent_, early, 1, RankState::kExited);  // before anyone is at the rendezvous
  jobs_->Tick();
  EXPECT_EQ(Get(early).state, JobState::kRunning);
  AtRendezvous(early, 0);
  jobs_->Tick();
  JobStatus st = Get(early);
  EXPECT_EQ(st.state, JobState::kFailed);
  ASSERT_TRUE(st.has_failure);
  EXPECT_EQ(st.failure.rank, 1);
  EXPECT_EQ(st.failure.message,
            "rank 1 on h1 exited with code 0 without calling hvd::Init(), while rank 0 waits "
            "for it at the rendezvous: every rank of a job calls hvd::Init(), or none does");
  EXPECT_EQ(st.exit_code, 1);
  Event(agent_, early, 0, RankState::kKilled);
  Event(agent_, early, 2, RankState::kKilled);

  // The other order, two of them.
  const std::string late = Running(Spec(4));
  AtRendezvous(late, 0);
  AtRendezvous(late, 1);
  Event(agent_, late, 2, RankState::kExited);
  Event(agent_, late, 3, RankState::kExited);
  jobs_->Tick();
  st = Get(late);
  EXPECT_EQ(st.state, JobState::kFailed);
  EXPECT_EQ(st.failure.message,
            "ranks 2, 3 (rank 2 on h1, ...) exited with code 0 without calling hvd::Init(), while "
            "ranks 0, 1 wait for them at the rendezvous: every rank of a job calls hvd::Init(), or "
            "none does");
  for (int r = 0; r < 2; ++r) Event(agent_, late, r, RankState::kKilled);

  // Every rank met: a rank may finish first.
  const std::string met = Running(Spec(2));
  AtRendezvous(met, 0);
  AtRendezvous(met, 1);
  Event(agent_, met, 1, RankState::kExited);
  jobs_->Tick();
  EXPECT_EQ(Get(met).state, JobState::kRunning);
}

TEST_F(JobSupervision, NoStartTimeoutWhenTheJobSetsZero) {
  JobSpec spec = Spec(1);
  spec.start_timeout_ms = 0;
  const std::string id = Running(spec);
  std::this_thread::sleep_for(30ms);
  jobs_->Tick();
  EXPECT_EQ(Get(id).state, JobState::kRunning);
}

// The launcher's default start timeout (the job gave none) passes with no rank at hvd's
// rendezvous: a program without hvd (torch.distributed, a script) keeps running, and stays
// unjudged when a rank reaches the rendezvous later in the attempt.
TEST_F(JobSupervision, DefaultStartTimeoutSparesAProgramWithoutHvd) {
  JobManagerOptions o = Options();
  o.client_lease = 24h;
  o.start_timeout = 50ms;
  Reset(o);
  const std::string id = Running(Spec(2));  // start_timeout_ms unset: the launcher's default
  std::this_thread::sleep_for(80ms);
  jobs_->Tick();
  EXPECT_EQ(Get(id).state, JobState::kRunning);
  AtRendezvous(id, 0);
  std::this_thread::sleep_for(20ms);
  jobs_->Tick();
  EXPECT_EQ(Get(id).state, JobState::kRunning);
}

// ... but once some rank has called hvd.init(), the default names the ranks still missing.
TEST_F(JobSupervision, DefaultStartTimeoutStillNamesMissingRanksOfAnHvdProgram) {
  JobManagerOptions o = Options();
  o.client_lease = 24h;
  o.start_timeout = 50ms;
  Reset(o);
  const std::string id = Running(Spec(2));
  AtRendezvous(id, 0);
  std::this_thread::sleep_for(80ms);
  jobs_->Tick();
  const JobStatus st = Get(id);
  EXPECT_EQ(st.state, JobState::kFailed);
  EXPECT_HAS(st.failure.message, "rank 1 did not reach the rendezvous within");
}

TEST_F(JobSupervision, StallReportsAreShownThenClearedOrFatalAfterTheStallTimeout) {
  JobSpec spec = Spec(4);
  spec.stall_timeout_ms = 100;
  spec.start_timeout_ms = 0;
  const std::string id = Running(spec);
  Stall(id, 0, "W\n0\n3\nrank 0 waits for rank 3");
  Stall(id, 2, "W\n0\n3\nrank 2 waits for rank 3");
  JobStatus st = Get(id);
  EXPECT_EQ(st.stall,
            "rank 3 on h1 has not responded for 0 s: ranks 0, 2 wait for it (stopped, or stuck "
            "outside hvd?)");
  EXPECT_GT(st.stall_since_ms, 0);
  Stall(id, 0, "");  // cleared
  Stall(id, 2, "");
  EXPECT_EQ(Get(id).stall, "");
  Stall(id, 1, "garbage");  // malformed: ignored
  EXPECT_EQ(Get(id).stall, "");

  Stall(id, 0, "S\n0\n2\nrank 2 on h1 has not submitted allreduce 'fc1.grad' for 0 s");
  jobs_->Tick();
  EXPECT_EQ(Get(id).state, JobState::kRunning);
  std::this_thread::sleep_for(150ms);
  jobs_->Tick();
  st = Get(id);
  EXPECT_EQ(st.state, JobState::kFailed);
  EXPECT_EQ(st.failure.rank, 2);
  EXPECT_HAS(st.failure.message,
             "(--stall-timeout 0 s): rank 2 on h1 has not submitted "
             "allreduce 'fc1.grad'");
}

TEST_F(JobSupervision, AnAttachedJobEndsWhenItsClientStaysAway) {
  JobManagerOptions o = Options();
  o.client_lease = 100ms;
  Reset(o);
  JobSpec spec = Spec(1);
  spec.start_timeout_ms = 0;
  const std::string attached = Submit(spec);
  spec.detached = true;
  const std::string detached = Submit(spec);
  jobs_->WatchStarted(attached);
  std::this_thread::sleep_for(150ms);
  jobs_->Tick();
  EXPECT_FALSE(control::IsTerminal(Get(attached).state));  // watched
  jobs_->WatchEnded(attached);
  jobs_->Tick();
  EXPECT_FALSE(control::IsTerminal(Get(attached).state));  // within the lease
  std::this_thread::sleep_for(150ms);
  jobs_->Tick();
  const JobStatus st = Get(attached);
  EXPECT_EQ(st.state, JobState::kCancelled);
  EXPECT_HAS(st.reason, "the hvdrun that submitted it attached went away");
  EXPECT_EQ(st.exit_code, 130);
  EXPECT_FALSE(control::IsTerminal(Get(detached).state));
}

TEST_F(JobSupervision, ARestartRunsEveryRankAgainAsTheNextAttempt) {
  JobSpec spec = Spec(2);
  spec.max_restarts = 1;
  spec.start_timeout_ms = 0;
  const std::string id = Running(spec);
  agent_->starts.clear();
  Event(agent_, id, 1, RankState::kExited, 3, 0, "boom");
  JobStatus st = Get(id);
  EXPECT_EQ(st.state, JobState::kRestarting);
  EXPECT_HAS(st.reason,
             "attempt 1 (HVD_ATTEMPT=0) failed: rank 1 on h1 exited with code 3; restart 1 of 1");
  ASSERT_EQ(agent_->stops.size(), 1u);
  EXPECT_TRUE(agent_->starts.empty());  // not while rank 0 still runs
  Event(agent_, id, 0, RankState::kKilled);
  st = Get(id);
  EXPECT_EQ(st.state, JobState::kStarting);
  EXPECT_EQ(st.attempt, 1);
  ASSERT_EQ(st.previous_failures.size(), 1u);
  EXPECT_EQ(st.previous_failures[0].message, "rank 1 on h1 exited with code 3");
  EXPECT_EQ(st.previous_failures[0].stderr_tail, "boom");
  EXPECT_FALSE(st.has_failure);
  ASSERT_EQ(agent_->starts.size(), 2u);
  EXPECT_EQ(agent_->starts[0].attempt, 1);
  EXPECT_EQ(agent_->starts[0].env.at("HVD_ATTEMPT"), "1");
  // The old attempt's late events change nothing; the new attempt's do.
  RankEventReport late;
  late.job_id = id;
  late.attempt = 0;
  late.rank = 1;
  late.state = RankState::kKilled;
  jobs_->OnRankEvent(Id(agent_), late);
  EXPECT_EQ(Get(id).state, JobState::kStarting);
  RankEventReport e;
  e.job_id = id;
  e.attempt = 1;
  e.rank = 0;
  e.state = RankState::kExited;
  e.exit_code = 5;
  jobs_->OnRankEvent(Id(agent_), e);
  st = Get(id);
  EXPECT_EQ(st.state, JobState::kFailed);
  EXPECT_EQ(st.exit_code, 5);
  EXPECT_EQ(st.reason,
            "rank 0 on h1 exited with code 5 (attempt 2; no restarts left "
            "(--max-restarts 1))");
}

// Rank 0's runtime blamed a peer before it exited: its failure waits for the one it is a
// consequence of (rank 1 exiting 3), which becomes the cause even though it arrived second.
TEST_F(JobSupervision, AFailureBlamedOnAPeerWaitsForThePeersOwn) {
  JobSpec spec = Spec(3);
  spec.start_timeout_ms = 0;
  const std::string id = Running(spec);
  jobs_->OnRendezvousKey("job/" + id + "/attempt/0/abort/0", "rank 1 closed the connection");
  Event(agent_, id, 0, RankState::kExited, 1, 0, "connection closed");
  EXPECT_EQ(Get(id).state, JobState::kRunning);  // held
  EXPECT_TRUE(agent_->stops.empty());
  Event(agent_, id, 1, RankState::kExited, 3, 0, "the real error");
  JobStatus st = Get(id);
  EXPECT_EQ(st.state, JobState::kFailed);
  EXPECT_EQ(st.failure.rank, 1);
  EXPECT_EQ(st.exit_code, 3);
  EXPECT_EQ(st.failure.stderr_tail, "the real error");
}

TEST_F(JobSupervision, AHeldFailureBecomesTheCauseWhenNothingBetterComes) {
  JobManagerOptions o = Options();
  o.client_lease = 24h;
  o.cause_settle = 50ms;
  Reset(o);
  JobSpec spec = Spec(2);
  spec.start_timeout_ms = 0;
  const std::string id = Running(spec);
  jobs_->OnRendezvousKey("job/" + id + "/attempt/0/abort/0", "rank 1 stopped responding");
  Event(agent_, id, 0, RankState::kExited, 1);
  jobs_->Tick();
  EXPECT_EQ(Get(id).state, JobState::kRunning);
  std::this_thread::sleep_for(80ms);
  jobs_->Tick();
  const JobStatus st = Get(id);
  EXPECT_EQ(st.state, JobState::kFailed);
  EXPECT_EQ(st.failure.rank, 0);
  EXPECT_EQ(agent_->stops.size(), 1u);  // rank 1 is torn down
}

TEST_F(JobSupervision, NoRestartForAJobThatCanNeverBePlaced) {
  JobSpec spec = Spec(9, {{"h1", 9}});  // h1 has 4 slots
  spec.max_restarts = 5;
  const std::string id = Submit(spec);
  EXPECT_EQ(Get(id).state, JobState::kFailed);
}

}  // namespace
}  // namespace hvd::launcherd
