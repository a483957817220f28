// Job's removal of elastic workers (launcherd/job_elastic.cc, docs/elastic.md "A worker that
// hangs"): an absence report stops the workers it names through their agents, their end reads as
// their removal, a lost stop is sent again as SIGKILL, workers removed together make one
// generation, and a report that no longer holds stops nobody.
#include <gtest/gtest.h>

#include <csignal>
#include <string>
#include <vector>

#include "job_elastic_fixture.h"
#include "testutil/expect.h"

namespace hvd::launcherd {
namespace {

using namespace std::chrono_literals;

using testing::At;
using testing::ElasticJob;
using testing::Ended;
using testing::Report;

TEST(JobElasticTest, AWorkerAbsentFromTheReFormIsStoppedAndLeavesAsRemoved) {
  auto job = ElasticJob(4, 2);
  job->TakePublications();
  EXPECT_TRUE(job->WorkersAbsent(0, "0 2 5000", At(1s)));
  std::vector<Job::Stop> stops = job->TakeStops();
  ASSERT_EQ(stops.size(), 1u);
  EXPECT_EQ(stops[0].agent_id, "b");
  EXPECT_EQ(stops[0].command.ranks, (std::vector<int>{2}));
  EXPECT_EQ(stops[0].command.attempt, 0);
  EXPECT_EQ(job->state(), JobState::kRunning);
  EXPECT_EQ(job->status.elastic.generation, 0);  // until it is gone
  const std::string why =
      "it did not come back to re-form generation 0 while worker 0 on h-a waited 5 s "
      "(HVD_PEER_TIMEOUT_SECONDS) for it: hung, stopped, or busy outside hvd that long; stopped "
      "by the launcher";
  EXPECT_EQ(job->status.elastic.events.back().what, "worker 2 on h-b is being removed: " + why);
  // Said again (another survivor, or the same one later): no second stop.
  EXPECT_FALSE(job->WorkersAbsent(1, "0 2 5100", At(1100ms)));
  EXPECT_TRUE(job->TakeStops().empty());
  // It ends by the stop's signal: its leaving says why it was stopped.
  Report(*job, Ended(2, RankState::kKilled, 0, 9, "stopped by the launcher: hung?"), At(2s));
  EXPECT_EQ(job->status.elastic.generation, 1);
  EXPECT_EQ(job->status.elastic.workers, (std::vector<int>{0, 1, 3}));
  EXPECT_EQ(job->status.elastic.events.back().what,
            "generation 1: worker 2 on h-b was removed: " + why + "; 3 workers go on");
  EXPECT_EQ(job->TakePublications().size(), 1u);
}

// A stop that never reached the agent (its stream broke) is sent again, as SIGKILL; a worker
// that crashed on its own meanwhile leaves with its own exit.
TEST(JobElasticTest, ARemovalIsSentAgainAndACrashFirstKeepsItsOwnExit) {
  auto job = ElasticJob(4, 2);
  ASSERT_TRUE(job->WorkersAbsent(0, "0 1,2 5000", At(1s)));
  EXPECT_EQ(job->TakeStops().size(), 2u);  // agents a and b
  const auto grace = job->KillGrace();
  EXPECT_FALSE(job->ResendRemovals(At(1s).steady + grace + 4s));
  Report(*job, Ended(2, RankState::kExited, 0, 11), At(2s));  // SIGSEGV before the stop came
  EXPECT_EQ(job->status.elastic.events.back().what,
            "generation 1: worker 2 on h-b was killed by SIGSEGV (signal 11) while the launcher "
            "was removing it; worker 1, being removed too, left out; 2 workers go on");
  EXPECT_EQ(job->status.elastic.workers, (std::vector<int>{0, 3}));
  ASSERT_TRUE(job->ResendRemovals(At(1s).steady + grace + 5s));
  std::vector<Job::Stop> again = job->TakeStops();
  ASSERT_EQ(again.size(), 1u);  // worker 1 only: 2 is gone
  EXPECT_EQ(again[0].agent_id, "a");
  EXPECT_EQ(again[0].command.ranks, std::vector<int>{1});
  EXPECT_EQ(again[0].command.signal, SIGKILL);
  EXPECT_EQ(again[0].command.grace_ms, 0);
  EXPECT_FALSE(job->ResendRemovals(At(1s).steady + grace + 6s));  // just sent
  job->TakePublications();
  Report(*job, Ended(1, RankState::kKilled, 0, 9), At(20s));
  EXPECT_FALSE(job->ResendRemovals(At(1s).steady + grace + 60s));
  // Left out already: its end makes no second generation, nobody re-forms again.
  EXPECT_EQ(job->status.elastic.generation, 1);
  EXPECT_EQ(job->status.elastic.workers, (std::vector<int>{0, 3}));
  EXPECT_TRUE(job->TakePublications().empty());
  EXPECT_HAS(job->status.elastic.events.back().what,
             "worker 1 on h-a was removed: it did not come back to re-form generation 0");
  EXPECT_HAS(job->status.elastic.events.back().what, "(left out of generation 1 already)");
  EXPECT_EQ(job->state(), JobState::kRunning);
}

// Two workers named in one report that both end by the stop: one generation without both (was
// one per end, and the survivors re-formed twice).
TEST(JobElasticTest, TwoWorkersRemovedByOneReportMakeOneGeneration) {
  auto job = ElasticJob(4, 2);
  job->TakePublications();
  ASSERT_TRUE(job->WorkersAbsent(0, "0 2,3 5000", At(1s)));
  Report(*job, Ended(3, RankState::kKilled, 0, 15), At(2s));
  EXPECT_EQ(job->status.elastic.generation, 1);
  EXPECT_EQ(job->status.elastic.workers, (std::vector<int>{0, 1}));
  EXPECT_HAS(job->status.elastic.events.back().what,
             "generation 1: worker 3 on h-b was removed: it did not come back");
  EXPECT_HAS(job->status.elastic.events.back().what,
             "; worker 2, being removed too, left out; 2 workers go on");
  Report(*job, Ended(2, RankState::kKilled, 0, 15), At(2100ms));
  EXPECT_EQ(job->status.elastic.generation, 1);
  EXPECT_EQ(job->TakePublications().size(), 1u);
  EXPECT_EQ(job->status.elastic.resets, 1);
  // The survivors finish: the job succeeds.
  Report(*job, Ended(0, RankState::kExited), At(3s));
  Report(*job, Ended(1, RankState::kExited), At(3s));
  EXPECT_EQ(job->state(), JobState::kSucceeded);
}

// Removed below --min-np: the job waits for more, and its failure names the removal once.
TEST(JobElasticTest, ARemovalBelowMinNpIsNamedOnceWhenTheWaitEnds) {
  auto job = ElasticJob(3, 3, /*timeout_ms=*/8000);
  ASSERT_TRUE(job->WorkersAbsent(0, "0 2 2000", At(1s)));
  Report(*job, Ended(2, RankState::kKilled, 0, 9), At(2s));
  EXPECT_EQ(job->state(), JobState::kRunning);  // waiting for more
  ASSERT_TRUE(job->ElasticDue(At(10s).steady));
  job->ElasticTimeout(At(10s));
  const std::string& m = job->status.failure.message;
  EXPECT_EQ(m.find("is being removed"), std::string::npos) << m;
  EXPECT_EQ(m.find("worker 2 on h-b was removed: it did not come back"), m.rfind("worker 2 on"))
      << m;
}

TEST(JobElasticTest, AnAbsenceReportThatNoLongerHoldsStopsNobody) {
  auto job = ElasticJob(4, 2);
  EXPECT_FALSE(job->WorkersAbsent(0, "1 2 5000", At(1s)));  // not this generation
  EXPECT_FALSE(job->WorkersAbsent(0, "0 0 5000", At(1s)));  // itself
  EXPECT_FALSE(job->WorkersAbsent(0, "0 7 5000", At(1s)));  // no such worker
  EXPECT_FALSE(job->WorkersAbsent(0, "garbage", At(1s)));
  ASSERT_TRUE(job->WorkersAbsent(2, "0 1 5000", At(1s)));
  job->TakeStops();
  EXPECT_FALSE(job->WorkersAbsent(1, "0 3 5000", At(1s)));  // from a worker being removed
  EXPECT_FALSE(job->WorkersAbsent(0, "", At(1s)));          // cleared
  Report(*job, Ended(3, RankState::kExited, 1), At(2s));
  EXPECT_FALSE(job->WorkersAbsent(0, "1 3 5000", At(3s)));  // gone already
  Report(*job, Ended(1, RankState::kExited, 1), At(4s));
  EXPECT_FALSE(job->WorkersAbsent(1, "2 2 5000", At(5s)));  // the reporter is gone
  EXPECT_TRUE(job->TakeStops().empty());
  EXPECT_EQ(job->state(), JobState::kRunning);

  auto fixed = testing::JobWithRanks(2, RankState::kRunning);
  EXPECT_FALSE(fixed->WorkersAbsent(0, "0 1 5000", At(1s)));
  EXPECT_TRUE(fixed->TakeStops().empty());
}


// A worker joining while another is being removed: the new generation has the newcomer and not
// the worker being removed (it had it back, and its end made one more generation).
TEST(JobElasticTest, GrowthDuringARemovalLeavesTheRemovedWorkerOut) {
  auto job = ElasticJob(4, 2);
  Report(*job, Ended(3, RankState::kExited, 1), At(500ms));  // generation 1: {0, 1, 2}
  ASSERT_TRUE(job->WorkersAbsent(0, "1 2 5000", At(1s)));
  job->TakeStops();
  RankStatus added = job->status.ranks[1];
  added.placement.rank = 4;
  added.state = RankState::kStarting;
  job->status.ranks.push_back(added);
  job->ElasticGrew({4}, At(2s));
  EXPECT_EQ(job->status.elastic.generation, 2);
  EXPECT_EQ(job->status.elastic.workers, (std::vector<int>{0, 1, 4}));
  Report(*job, Ended(2, RankState::kKilled, 0, 15), At(3s));
  EXPECT_EQ(job->status.elastic.generation, 2) << job->status.elastic.events.back().what;
  EXPECT_HAS(job->status.elastic.events.back().what, "(left out of generation 2 already)");
}

// The last worker not being removed fails: the job fails, and says the others were being
// removed rather than that every worker is gone.
TEST(JobElasticTest, TheLastWorkerNotBeingRemovedFailingSaysSo) {
  auto job = ElasticJob(2, 1);
  ASSERT_TRUE(job->WorkersAbsent(0, "0 1 5000", At(1s)));
  Report(*job, Ended(0, RankState::kExited, 3), At(2s));
  EXPECT_EQ(job->state(), JobState::kFailed);
  const std::string& m = job->status.failure.message;
  EXPECT_EQ(m.rfind("no worker of the elastic job is left but those being removed; the last, "
                    "worker 0 on h-a exited with code 3; worker 1, being removed too, left out",
                    0),
            0u)
      << m;
}

}  // namespace
}  // namespace hvd::launcherd
