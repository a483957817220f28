// An elastic job below --min-np that no worker can join (docs/elastic.md "Below --min-np"):
// Scheduler::CouldGrow over the agents' slots (held by live workers, dropped by failed ones, on
// hosts left out for good or for a cool-down) and, in a closed cluster (hvdrun's local mode), the
// manager failing such a job at its next tick rather than after --elastic-timeout; an open
// cluster keeps waiting, since an agent may register. Also the manager's side of a shrink by the
// discovery script (growth past the queue, the stop on rank 0's commit note).
#include <gtest/gtest.h>

#include <string>

#include "job_elastic_fixture.h"
#include "job_manager_fixture.h"
#include "launcherd/job_scheduler.h"
#include "testutil/expect.h"

namespace hvd::launcherd {
namespace {

using testing::At;
using testing::ElasticJob;
using testing::Ended;
using testing::Report;

// Agents "a" on h-a and "b" on h-b (ElasticJob's), with these slots.
Scheduler::Pass Agents(int a_slots, int b_slots) {
  Scheduler::Pass pass;
  pass.agents.push_back({"a", "h-a", "addr-a", a_slots, {}, 0});
  pass.agents.push_back({"b", "h-b", "addr-b", b_slots, {}, 1});
  return pass;
}

TEST(JobStrandedTest, EverySlotHeldOrOfAFailedWorkerLeavesNoWayBack) {
  auto job = ElasticJob(4, 4);
  Report(*job, Ended(3, RankState::kExited, 3), At(1s));
  ASSERT_TRUE(job->ElasticWaiting());  // 3 live, --min-np 4
  std::string why;
  EXPECT_FALSE(Scheduler::CouldGrow(*job, Agents(2, 2), &why));
  EXPECT_EQ(why,
            "the agents' 4 slots: 3 held by live workers, 1 of failed workers (a failed "
            "worker's slot is not used again)");
  // One more slot on b: a worker could start there.
  EXPECT_TRUE(Scheduler::CouldGrow(*job, Agents(2, 3), &why));
  // No agent at all: nothing to conclude from.
  EXPECT_TRUE(Scheduler::CouldGrow(*job, Scheduler::Pass{}, &why));

  job->ElasticStranded("the agents' 4 slots: ...", At(2s));
  EXPECT_EQ(job->state(), JobState::kFailed);
  EXPECT_EQ(job->status.failure.message,
            "fewer than --min-np 4 workers (3 live), and no worker can come: the agents' 4 "
            "slots: ...; not waiting --elastic-timeout: worker 3 on h-b exited with code 3");
}

TEST(JobStrandedTest, AHostLeftOutForGoodHasNoSlotButOneCoolingDownComesBack) {
  for (const bool cooldown : {false, true}) {
    SCOPED_TRACE(cooldown);
    auto job = ElasticJob(4, 3);
    if (cooldown) {
      job->status.spec.cooldown_min_ms = 1000;
      job->status.spec.cooldown_max_ms = 2000;
    }
    // Two failures on h-b (2 s apart: two changes): the host is left out.
    Report(*job, Ended(2, RankState::kExited, 3), At(1s));
    Report(*job, Ended(3, RankState::kExited, 3), At(3s));
    ASSERT_TRUE(job->ElasticWaiting());
    EXPECT_EQ(job->HostLeftOutForGood("h-b"), !cooldown);
    std::string why;
    // h-b has 8 slots, 2 of them dropped: free ones, once it may be used again.
    EXPECT_EQ(Scheduler::CouldGrow(*job, Agents(2, 8), &why), cooldown);
    if (!cooldown) {
      EXPECT_EQ(why,
                "the agents' 2 slots: 2 held by live workers, 0 of failed workers (a failed "
                "worker's slot is not used again); h-b is left out of the job for its life (two "
                "of its workers failed there, or its agent was lost; hvdrun "
                "--blacklist-cooldown-range lets a host come back)");
    }
  }
}

TEST(JobStrandedTest, NotWaitingIsNeverStranded) {
  auto job = ElasticJob(4, 2);
  Report(*job, Ended(3, RankState::kExited, 3), At(1s));
  EXPECT_FALSE(job->ElasticWaiting());  // 3 live, --min-np 2: it goes on
  job->ElasticStranded("why", At(2s));
  EXPECT_EQ(job->state(), JobState::kRunning);
}

class StrandedManagerTest : public JobManagerFixture {
 protected:
  // A RUNNING elastic job of 2 workers, --min-np 2, on one agent of 2 slots, of which worker 1
  // has exited 3: below --min-np with no slot left.
  std::string StrandedJob(bool closed) {
    JobManagerOptions o = Options();
    o.closed_cluster = closed;
    Reset(o);
    link_ = AddAgent("h-a", 2);
    JobSpec spec = Spec(2);
    spec.min_np = 2;
    spec.max_np = 2;
    const std::string id = Submit(spec);
    EXPECT_EQ(Get(id).state, JobState::kStarting);
    for (int r = 0; r < 2; ++r) Event(link_, id, r, RankState::kRunning);
    EXPECT_EQ(Get(id).state, JobState::kRunning);
    Event(link_, id, 1, RankState::kExited, 3);
    jobs_->Tick();
    return id;
  }
  std::shared_ptr<FakeLink> link_;
};

TEST_F(StrandedManagerTest, AClosedClusterFailsTheJobAtOnce) {
  const JobStatus st = Get(StrandedJob(/*closed=*/true));
  EXPECT_EQ(st.state, JobState::kFailed);
  EXPECT_HAS(st.failure.message,
             "fewer than --min-np 2 workers (1 live), and no worker can come: the agents' 2 "
             "slots: 1 held by live workers, 1 of failed workers");
  EXPECT_HAS(st.failure.message,
             "not waiting --elastic-timeout: worker 1 on h-a exited with code 3");
}

TEST_F(StrandedManagerTest, AnOpenClusterWaitsForAnAgentToRegister) {
  const JobStatus st = Get(StrandedJob(/*closed=*/false));
  EXPECT_EQ(st.state, JobState::kRunning);
  EXPECT_NE(st.elastic.below_min_since_ms, 0);
  EXPECT_HAS(st.elastic.events.back().what,
             "fewer than --min-np 2: waiting up to --elastic-timeout");
}

// The manager's side of a shrink (job_shrink.cc): a discovery answer that moves the job to another
// host starts workers there though the job is at --max-np and another job queues, and the old
// workers are stopped once worker 2, rank 0 after them, says it committed (committed/2).
TEST_F(StrandedManagerTest, AShrinkGrowsPastTheQueueAndStopsOnceRankZeroCommitted) {
  auto a = AddAgent("h-a", 2);
  auto b = AddAgent("h-b", 2);
  JobSpec spec = Spec(2, {{"h-a", 2}});
  spec.min_np = 1;
  spec.max_np = 2;
  const std::string id = Submit(spec);
  for (int r = 0; r < 2; ++r) Event(a, id, r, RankState::kRunning);
  ASSERT_EQ(Get(id).state, JobState::kRunning);
  const std::string queued = Submit(4);  // 4 slots: it waits for this job's
  ASSERT_EQ(Get(queued).state, JobState::kPending);

  ASSERT_TRUE(jobs_->UpdateHosts(id, {{"h-b", 2}}).ok());
  jobs_->Tick();
  JobStatus st = Get(id);
  ASSERT_EQ(st.ranks.size(), 4u) << "no worker started on h-b";
  EXPECT_EQ(st.ranks[2].placement.host, "h-b");
  EXPECT_EQ(st.ranks[3].placement.host, "h-b");
  EXPECT_EQ(st.elastic.workers, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_HAS(st.elastic.events.back().what,
             "workers 2 on h-b, 3 on h-b joined; 4 workers (--max-np 2; workers 0, 1 leave the "
             "list once the new ones hold the state)");
  {
    std::lock_guard<std::mutex> lock(a->mu);
    EXPECT_TRUE(a->stops.empty());
  }
  for (int r = 2; r < 4; ++r) Event(b, id, r, RankState::kRunning);

  jobs_->OnRendezvousKey("job/" + id + "/attempt/0/committed/3", "1");  // not rank 0 after them
  {
    std::lock_guard<std::mutex> lock(a->mu);
    EXPECT_TRUE(a->stops.empty());
  }
  jobs_->OnRendezvousKey("job/" + id + "/attempt/0/committed/2", "1");
  std::lock_guard<std::mutex> lock(a->mu);
  ASSERT_EQ(a->stops.size(), 1u);
  EXPECT_EQ(a->stops[0].ranks, (std::vector<int>{0, 1}));
  EXPECT_HAS(a->stops[0].reason, Job::kLeftTheList);
}

}  // namespace
}  // namespace hvd::launcherd
