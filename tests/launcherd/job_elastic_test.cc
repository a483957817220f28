// Job's elastic rules (launcherd/job_elastic.cc, docs/elastic.md) without a manager: generations
// published as workers leave, the job going on while --min-np live, the wait below --min-np and
// its timeout, --reset-limit, the end of an elastic job; a fixed job untouched by any of it.
#include "launcherd/job.h"

#include <gtest/gtest.h>

#include <csignal>
#include <memory>
#include <string>
#include <vector>

#include "job_elastic_fixture.h"
#include "test_clock.h"
#include "testutil/expect.h"

namespace hvd::launcherd {
namespace {

using namespace std::chrono_literals;

using testing::At;
using testing::kT0;

using testing::ElasticJob;
using testing::Ended;
using testing::kAllConnected;
using testing::Report;

TEST(JobElasticTest, GenerationZeroIsEveryWorker) {
  auto job = ElasticJob(4, 2);
  EXPECT_EQ(job->status.elastic.generation, 0);
  EXPECT_EQ(job->status.elastic.workers, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(job->status.elastic.resets, 0);
  EXPECT_EQ(job->status.elastic.below_min_since_ms, 0);
  std::vector<Job::Publication> pubs = job->TakePublications();
  ASSERT_EQ(pubs.size(), 1u);
  EXPECT_EQ(pubs[0].generation, 0);
  EXPECT_EQ(pubs[0].workers, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_TRUE(job->TakePublications().empty());  // taken once
  ASSERT_EQ(job->status.elastic.events.size(), 1u);
  const control::MembershipEvent& e = job->status.elastic.events[0];
  EXPECT_EQ(e.generation, 0);
  EXPECT_EQ(e.time_ms, kT0.wall_ms);
  EXPECT_EQ(e.workers, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(e.what, "generation 0: 4 workers (--min-np 2, --max-np 4)");
}

TEST(JobElasticTest, AFixedJobBeginsNoGeneration) {
  auto job = testing::JobWithRanks(2, RankState::kRunning);
  EXPECT_FALSE(job->elastic());
  job->ElasticBegin(kT0);
  EXPECT_EQ(job->status.elastic.generation, -1);
  EXPECT_TRUE(job->TakePublications().empty());
  EXPECT_TRUE(job->status.elastic.events.empty());
}

TEST(JobElasticTest, AWorkerExitingNonZeroLeavesAndTheOthersGoOn) {
  auto job = ElasticJob(4, 2);
  job->TakePublications();
  Report(*job, Ended(1, RankState::kExited, 3), At(5ms));
  EXPECT_EQ(job->state(), JobState::kRunning);
  EXPECT_FALSE(job->status.has_failure);
  EXPECT_TRUE(job->TakeStops().empty());  // nobody is stopped
  EXPECT_EQ(job->status.elastic.generation, 1);
  EXPECT_EQ(job->status.elastic.workers, (std::vector<int>{0, 2, 3}));
  EXPECT_EQ(job->status.elastic.resets, 1);
  std::vector<Job::Publication> pubs = job->TakePublications();
  ASSERT_EQ(pubs.size(), 1u);
  EXPECT_EQ(pubs[0].generation, 1);
  EXPECT_EQ(pubs[0].workers, (std::vector<int>{0, 2, 3}));
  ASSERT_EQ(job->status.elastic.events.size(), 2u);
  const control::MembershipEvent& e = job->status.elastic.events[1];
  EXPECT_EQ(e.generation, 1);
  EXPECT_EQ(e.time_ms, kT0.wall_ms + 5);
  EXPECT_EQ(e.workers, (std::vector<int>{0, 2, 3}));
  EXPECT_EQ(e.what, "generation 1: worker 1 on h-a exited with code 3; 3 workers go on");
  EXPECT_EQ(job->status.ranks[1].state, RankState::kExited);  // the record keeps the worker
}

TEST(JobElasticTest, EveryWayOfLeavingMakesAGeneration) {
  struct Case {
    const char* what;
    RankEventReport ev;
    const char* says;
  };
  const Case cases[] = {
      {"signal", Ended(3, RankState::kExited, 0, 9),
       "generation 1: worker 3 on h-b was killed by SIGKILL (signal 9); 3 workers go on"},
      {"killed by its agent", Ended(3, RankState::kKilled, 0, 0, "out of memory"),
       "generation 1: worker 3 on h-b was killed by its agent: out of memory; 3 workers go on"},
      {"failed to start", Ended(3, RankState::kFailedToStart, 0, 0, "no such file"),
       "generation 1: worker 3 on h-b failed to start: no such file; 3 workers go on"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    auto job = ElasticJob(4, 2);
    job->TakePublications();
    Report(*job, c.ev, At(1ms));
    EXPECT_EQ(job->state(), JobState::kRunning);
    EXPECT_TRUE(job->TakeStops().empty());
    EXPECT_EQ(job->status.elastic.generation, 1);
    EXPECT_EQ(job->status.elastic.workers, (std::vector<int>{0, 1, 2}));
    EXPECT_EQ(job->TakePublications().size(), 1u);
    EXPECT_EQ(job->status.elastic.events.back().what, c.says);
  }
}

TEST(JobElasticTest, ALostAgentTakesItsWorkersInOneGeneration) {
  // As JobManager::OnAgentLost: the agent's ranks marked killed, then one loss for them all.
  auto job = ElasticJob(4, 2);
  job->TakePublications();
  EXPECT_EQ(job->KillRanksOnAgent("b", "agent on h-b lost", kT0.wall_ms), (std::vector<int>{2, 3}));
  JobFailure f;
  f.rank = 2;
  f.host = "h-b";
  f.message = "agent on h-b lost (agent b stopped sending heartbeats); ranks 2, 3 ran there";
  job->WorkerLost(f, control::kGenericFailureExitCode, At(2ms));
  EXPECT_EQ(job->state(), JobState::kRunning);
  EXPECT_TRUE(job->TakeStops().empty());
  EXPECT_EQ(job->status.elastic.workers, (std::vector<int>{0, 1}));
  std::vector<Job::Publication> pubs = job->TakePublications();
  ASSERT_EQ(pubs.size(), 1u);
  EXPECT_EQ(pubs[0].generation, 1);
  EXPECT_HAS(job->status.elastic.events.back().what, "worker 2 on h-b left: agent on h-b lost");
  EXPECT_HAS(job->status.elastic.events.back().what, "2 workers go on");
}

TEST(JobElasticTest, TwoLossesMakeTwoGenerations) {
  auto job = ElasticJob(4, 2);
  job->TakePublications();
  Report(*job, Ended(0, RankState::kExited, 1), At(1ms));
  Report(*job, Ended(3, RankState::kExited, 2), At(2s));
  EXPECT_EQ(job->state(), JobState::kRunning);
  EXPECT_EQ(job->status.elastic.generation, 2);
  EXPECT_EQ(job->status.elastic.resets, 2);
  EXPECT_EQ(job->status.elastic.workers, (std::vector<int>{1, 2}));
  std::vector<Job::Publication> pubs = job->TakePublications();
  ASSERT_EQ(pubs.size(), 2u);  // oldest first, each written in turn
  EXPECT_EQ(pubs[0].generation, 1);
  EXPECT_EQ(pubs[0].workers, (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(pubs[1].generation, 2);
  EXPECT_EQ(pubs[1].workers, (std::vector<int>{1, 2}));
  ASSERT_EQ(job->status.elastic.events.size(), 3u);
  EXPECT_EQ(job->status.elastic.events[2].what,
            "generation 2: worker 3 on h-b exited with code 2; 2 workers go on");
  // A late or repeated report of a worker already gone changes nothing.
  EXPECT_FALSE(job->OnRankEvent(Ended(0, RankState::kExited, 1), "a", kAllConnected, At(3s)));
  EXPECT_TRUE(job->TakePublications().empty());
}

// A host's agent stopping reports its workers one by one: losses within a second are one change
// for --reset-limit (each still publishes its generation).
TEST(JobElasticTest, LossesWithinASecondAreOneChangeForTheResetLimit) {
  auto job = ElasticJob(4, 1, 600000, /*reset_limit=*/1);
  Report(*job, Ended(2, RankState::kKilled, 0, 9), At(1ms));
  Report(*job, Ended(3, RankState::kKilled, 0, 9), At(4ms));
  EXPECT_EQ(job->state(), JobState::kRunning);
  EXPECT_EQ(job->status.elastic.generation, 2);
  EXPECT_EQ(job->status.elastic.resets, 1);
  Report(*job, Ended(1, RankState::kExited, 3), At(3s));  // a change of its own: one too many
  EXPECT_EQ(job->state(), JobState::kFailed);
  EXPECT_HAS(job->status.reason, "(--reset-limit 1)");
}

// A worker joining after the first meeting re-forms the job: it counts against --reset-limit, as
// Horovod's driver counts every reset (it passed the limit freely).
TEST(JobElasticTest, GrowthCountsAgainstTheResetLimit) {
  auto job = ElasticJob(2, 1, 600000, /*reset_limit=*/1);
  job->status.spec.max_np = 4;
  job->at_rendezvous = 2;  // the first workers met
  for (int id : {2, 3}) {
    RankStatus added = job->status.ranks[1];
    added.placement.rank = id;
    added.state = RankState::kStarting;
    job->status.ranks.push_back(added);
    job->ElasticGrew({id}, At(std::chrono::seconds(id)));
    if (id == 2) {
      EXPECT_EQ(job->state(), JobState::kRunning);
      EXPECT_EQ(job->status.elastic.resets, 1);
    }
  }
  EXPECT_EQ(job->state(), JobState::kFailed);
  EXPECT_EQ(job->status.exit_code, control::kGenericFailureExitCode);
  EXPECT_HAS(job->status.reason,
             "worker 3 on h-b joined; the job already changed membership 1 "
             "time (--reset-limit 1; a worker joining re-forms the job too)");
}

TEST(JobElasticTest, BelowMinNpWaitsThenFailsNamingTheLostWorkers) {
  auto job = ElasticJob(4, 3, /*timeout_ms=*/1500);
  job->TakePublications();
  Report(*job, Ended(1, RankState::kExited, 1), At(1ms));  // 3 left: generation 1
  ASSERT_EQ(job->TakePublications().size(), 1u);
  Report(*job, Ended(2, RankState::kExited, 0, 9), At(10ms));  // 2 left, below --min-np 3
  EXPECT_EQ(job->state(), JobState::kRunning);
  EXPECT_TRUE(job->TakePublications().empty());  // no generation of fewer than --min-np
  EXPECT_TRUE(job->TakeStops().empty());
  EXPECT_EQ(job->status.elastic.generation, 1);
  EXPECT_EQ(job->status.elastic.workers, (std::vector<int>{0, 2, 3}));
  EXPECT_EQ(job->status.elastic.below_min_since_ms, kT0.wall_ms + 10);
  EXPECT_EQ(job->status.elastic.events.back().what,
            "worker 2 on h-b was killed by SIGKILL (signal 9); 2 workers left, fewer than "
            "--min-np 3: waiting up to --elastic-timeout 1.5 s for more");
  // A third loss does not restart the clock.
  Report(*job, Ended(0, RankState::kExited, 4), At(500ms));
  EXPECT_EQ(job->status.elastic.below_min_since_ms, kT0.wall_ms + 10);
  EXPECT_TRUE(job->TakePublications().empty());

  EXPECT_FALSE(job->ElasticDue(At(1509ms).steady));
  EXPECT_TRUE(job->ElasticDue(At(1510ms).steady));
  job->ElasticTimeout(At(1510ms));
  EXPECT_EQ(job->state(), JobState::kFailed);
  EXPECT_EQ(job->status.exit_code, control::kGenericFailureExitCode);
  EXPECT_EQ(job->status.reason,
            "fewer than --min-np 3 workers (1 live) for 1.5 s (--elastic-timeout): worker 2 on "
            "h-b was killed by SIGKILL (signal 9); worker 0 on h-a exited with code 4");
  EXPECT_EQ(job->status.reason.find("worker 1"), std::string::npos)
      << "worker 1's loss made a generation of --min-np: not part of the shortfall";
  EXPECT_EQ(job->TakeStops().size(), 1u);            // worker 3's agent, b
  EXPECT_FALSE(job->ElasticDue(At(5000ms).steady));  // ended
}

TEST(JobElasticTest, NotBelowMinNpIsNeverDue) {
  auto job = ElasticJob(4, 2, /*timeout_ms=*/1000);
  EXPECT_FALSE(job->ElasticDue(At(1h).steady));
  Report(*job, Ended(1, RankState::kExited, 1), At(1ms));
  EXPECT_FALSE(job->ElasticDue(At(1h).steady));
}

TEST(JobElasticTest, LiveWorkersExitingZeroSucceed) {
  auto job = ElasticJob(4, 2);
  Report(*job, Ended(2, RankState::kExited, 1), At(1ms));
  for (int r : {0, 1}) {
    Report(*job, Ended(r, RankState::kExited), At(2ms));
    EXPECT_EQ(job->state(), JobState::kRunning) << "worker 3 still runs";
  }
  Report(*job, Ended(3, RankState::kExited), At(3ms));
  EXPECT_EQ(job->state(), JobState::kSucceeded);
  EXPECT_EQ(job->status.exit_code, 0);
  EXPECT_EQ(job->status.reason, "the 3 workers of generation 1 exited with code 0");
  EXPECT_TRUE(job->TakeStops().empty());
}

// Horovod's rule: once a worker finished, the others' failures (one that could not re-form
// without it) end the job as it is: succeeded, and the finished key is published once.
TEST(JobElasticTest, AfterAWorkerFinishedFailuresNoLongerFailTheJob) {
  auto job = ElasticJob(3, 1);
  job->TakePublications();
  Report(*job, Ended(0, RankState::kExited), At(1ms));
  std::vector<Job::Publication> pubs = job->TakePublications();
  ASSERT_EQ(pubs.size(), 1u);
  EXPECT_EQ(pubs[0].finished, "worker 0 on h-a");
  Report(*job, Ended(1, RankState::kExited, 1), At(2ms));
  EXPECT_EQ(job->state(), JobState::kRunning);
  EXPECT_EQ(job->status.elastic.generation, 0) << "no membership change once finishing";
  EXPECT_TRUE(job->TakePublications().empty());
  EXPECT_FALSE(job->ElasticWantsWorkers()) << "a finishing job never grows";
  Report(*job, Ended(2, RankState::kExited, 1), At(3ms));
  EXPECT_EQ(job->state(), JobState::kSucceeded);
  EXPECT_EQ(job->status.exit_code, 0);
  EXPECT_HAS(job->status.reason, "worker 0 on h-a finished training (exit 0)");
}

// A launcher restart rebuilds what the record implies: finishing, dropped slots, excluded hosts.
TEST(JobElasticTest, ARestoredJobKnowsWhatItsRecordImplies) {
  auto job = ElasticJob(4, 1);
  job->status.spec.max_np = 8;
  for (int r : {2, 3}) {  // two failures on h-b: the host is out
    job->status.ranks[r].state = RankState::kExited;
    job->status.ranks[r].exit_code = 1;
  }
  job->RanksReplaced();
  job->ElasticRestored(At(1ms));
  const control::RankSlot& b = job->status.ranks[2].placement;
  EXPECT_FALSE(job->ElasticSlotUsable(b.agent_id, b.host, b.slot, At(3ms).steady));
  EXPECT_FALSE(job->ElasticSlotUsable(b.agent_id, b.host, 99, At(3ms).steady)) << "h-b is out";
  const control::RankSlot& a = job->status.ranks[0].placement;
  EXPECT_TRUE(job->ElasticSlotUsable(a.agent_id, a.host, 99, At(3ms).steady));
  EXPECT_TRUE(job->ElasticWantsWorkers());
  job->status.ranks[1].state = RankState::kExited;  // worker 1 had finished
  job->RanksReplaced();
  job->ElasticRestored(At(2ms));
  EXPECT_FALSE(job->ElasticWantsWorkers());
  // Arrivals at the current generation's meetings are read after a restart too (its member list
  // is in the record; older ones are not).
  auto restored = testing::JobWithRanks(4, RankState::kRunning);
  restored->status = job->status;
  restored->status.elastic.generation = 3;
  restored->status.elastic.workers = {0, 3};
  EXPECT_EQ(restored->MeetingWorker(3, 1), -1);
  restored->ElasticRestored(At(5ms));
  EXPECT_EQ(restored->MeetingWorker(3, 1), 3);
  EXPECT_EQ(restored->MeetingWorker(2, 0), -1);
}

// --blacklist-cooldown-range 1 3: a host left out comes back after 1 s, then 2 s, then 3 s (the
// cap); its failed workers' slots stay dropped. Without the flag it is out for the job's life.
TEST(JobElasticTest, AnExcludedHostComesBackAfterItsCoolDown) {
  auto job = ElasticJob(6, 1);
  job->status.spec.max_np = 12;
  job->status.spec.cooldown_min_ms = 1000;
  job->status.spec.cooldown_max_ms = 3000;
  const control::RankSlot b = job->status.ranks[3].placement;  // 3, 4, 5 run on h-b
  Report(*job, Ended(3, RankState::kExited, 1), At(1ms));
  Report(*job, Ended(4, RankState::kExited, 1), At(2ms));  // the second failure there
  EXPECT_FALSE(job->ElasticSlotUsable(b.agent_id, b.host, 99, At(999ms).steady));
  EXPECT_TRUE(job->ElasticSlotUsable(b.agent_id, b.host, 99, At(1002ms).steady));
  EXPECT_FALSE(job->ElasticSlotUsable(b.agent_id, b.host, b.slot, At(5s).steady))
      << "a failed worker's slot stays dropped";
  Report(*job, Ended(5, RankState::kKilled, 0, 9), At(10s));  // two more: out again, for 2 s
  EXPECT_TRUE(job->ElasticSlotUsable(b.agent_id, b.host, 99, At(10s).steady)) << "one failure";
  job->status.ranks.push_back(job->status.ranks[0]);  // a worker grown onto h-b fails too
  job->status.ranks.back().placement = b;
  job->status.ranks.back().placement.rank = 6;
  job->status.ranks.back().placement.slot = 7;
  job->status.ranks.back().state = RankState::kRunning;
  job->RanksReplaced();
  Report(*job, Ended(6, RankState::kExited, 1), At(11s));
  EXPECT_FALSE(job->ElasticSlotUsable(b.agent_id, b.host, 99, At(12900ms).steady));
  EXPECT_TRUE(job->ElasticSlotUsable(b.agent_id, b.host, 99, At(13002ms).steady));
}

TEST(JobElasticTest, TheLastLiveWorkerFailingFailsTheJob) {
  auto job = ElasticJob(2, 1);
  Report(*job, Ended(0, RankState::kExited, 1), At(1ms));  // 1 left: generation 1
  EXPECT_EQ(job->state(), JobState::kRunning);
  EXPECT_EQ(job->status.elastic.workers, (std::vector<int>{1}));
  EXPECT_HAS(job->status.elastic.events.back().what,
             "generation 1: worker 0 on h-a exited with code 1; 1 worker ");
  job->TakePublications();
  Report(*job, Ended(1, RankState::kExited, 7), At(2ms));
  EXPECT_EQ(job->state(), JobState::kFailed);
  EXPECT_EQ(job->status.exit_code, 7);
  EXPECT_EQ(job->status.failure.rank, 1);
  // The first loss is named too: a program that does not re-form loses them all at once.
  EXPECT_EQ(job->status.reason,
            "every worker of the elastic job is gone (the first to go: worker 0 on h-a exited "
            "with code 1); the last, worker 1 on h-b exited with code 7 (if they failed because "
            "a peer did, the program must catch HorovodInternalError and re-form, as "
            "hvd.elastic.run does; its own exceptions end a worker)");
  EXPECT_TRUE(job->TakePublications().empty());
}

TEST(JobElasticTest, ResetLimitFailsTheChangeOverIt) {
  auto job = ElasticJob(4, 1, 600000, /*reset_limit=*/1);
  Report(*job, Ended(0, RankState::kExited, 1), At(1ms));
  EXPECT_EQ(job->state(), JobState::kRunning);
  EXPECT_EQ(job->status.elastic.resets, 1);
  job->TakePublications();
  Report(*job, Ended(3, RankState::kExited, 5), At(2s));
  EXPECT_EQ(job->state(), JobState::kFailed);
  EXPECT_EQ(job->status.exit_code, 5);
  EXPECT_EQ(job->status.reason,
            "worker 3 on h-b exited with code 5; the job already changed membership 1 time "
            "(--reset-limit 1)");
  EXPECT_TRUE(job->TakePublications().empty());
  EXPECT_EQ(job->TakeStops().size(), 2u);  // workers 1 (a) and 2 (b) still live
}

TEST(JobElasticTest, ANewAttemptForgetsTheMembership) {
  JobRules rules;
  rules.restart.base_delay = 0ms;
  auto job = testing::JobWithRanks(2, RankState::kRunning, rules, /*max_restarts=*/1);
  job->status.spec.min_np = 2;
  job->status.spec.max_np = 2;
  job->ElasticBegin(kT0);
  job->SetState(JobState::kRunning, "running");
  Report(*job, Ended(0, RankState::kExited, 1), At(1ms));  // below --min-np 2
  ASSERT_TRUE(job->ElasticDue(At(600001ms).steady));
  job->ElasticTimeout(At(600001ms));
  EXPECT_EQ(job->state(), JobState::kRestarting);
  job->KillRanksOnAgent("b", "stopped", kT0.wall_ms);
  ASSERT_TRUE(job->RestartDue(At(600002ms).steady));
  job->NextAttempt(At(600002ms));
  EXPECT_EQ(job->status.elastic.generation, -1);
  EXPECT_TRUE(job->status.elastic.events.empty());
  EXPECT_EQ(job->status.elastic.below_min_since_ms, 0);
  EXPECT_TRUE(job->TakePublications().empty());  // the old attempt's are not written
  EXPECT_FALSE(job->ElasticDue(At(2h).steady));
}

TEST(JobElasticTest, AFixedJobStillFailsOnAnyFailure) {
  auto job = testing::JobWithRanks(4, RankState::kRunning);
  ASSERT_TRUE(job->SetState(JobState::kRunning, "running"));
  job->ElasticBegin(kT0);
  Report(*job, Ended(1, RankState::kExited, 3), At(1ms));
  EXPECT_EQ(job->state(), JobState::kFailed);
  EXPECT_EQ(job->status.reason, "rank 1 on h-a exited with code 3");
  EXPECT_EQ(job->TakeStops().size(), 2u);
  EXPECT_TRUE(job->TakePublications().empty());
  EXPECT_EQ(job->status.elastic.generation, -1);

  auto killed = testing::JobWithRanks(2, RankState::kRunning);
  ASSERT_TRUE(killed->SetState(JobState::kRunning, "running"));
  Report(*killed, Ended(0, RankState::kKilled, 0, 0, "oom"), At(1ms));
  EXPECT_EQ(killed->state(), JobState::kFailed);
  EXPECT_EQ(killed->status.reason, "rank 0 on h-a was killed by its agent: oom");

  // A fixed job succeeds only when every rank exited 0, not when the live ones did.
  auto ok = testing::JobWithRanks(2, RankState::kRunning);
  ASSERT_TRUE(ok->SetState(JobState::kRunning, "running"));
  Report(*ok, Ended(0, RankState::kExited), At(1ms));
  Report(*ok, Ended(1, RankState::kExited), At(2ms));
  EXPECT_EQ(ok->state(), JobState::kSucceeded);
  EXPECT_EQ(ok->status.reason, "all 2 ranks exited with code 0");
}

}  // namespace
}  // namespace hvd::launcherd
