// Job on its own (launcherd/job.h): state transitions, restarts and the choice of the cause, with
// no JobManager, no agents and a clock the test sets.
#include "launcherd/job.h"

#include <gtest/gtest.h>

#include <memory>

#include "test_clock.h"
#include "testutil/expect.h"

namespace hvd::launcherd {
namespace {

using namespace std::chrono_literals;

using testing::At;
using testing::kT0;

// A job RUNNING with ranks 0..np/2-1 on agent "a" (host h-a), the others on "b" (host h-b).
std::unique_ptr<Job> RunningJob(int np, JobRules rules = {}, int max_restarts = 0) {
  auto job = testing::JobWithRanks(np, RankState::kRunning, rules, max_restarts);
  EXPECT_EQ(job->state(), JobState::kStarting);
  EXPECT_TRUE(job->SetState(JobState::kRunning, "running"));
  return job;
}

JobFailure RankExit(const Job& job, int rank, int code) {
  JobFailure f;
  f.rank = rank;
  f.host = job.status.ranks[rank].placement.host;
  f.exit_code = code;
  f.message = "rank " + std::to_string(rank) + " exited with code " + std::to_string(code);
  return f;
}

const AgentConnected kAllConnected = [](const std::string&) { return true; };

TEST(JobTest, TransitionsAreCheckedAndEachChangeIsObserved) {
  Job job({}, 10, 1 << 10);
  job.status.id = "j1";
  int observed = 0;
  job.SetObserver([&](const Job& j) {
    ++observed;
    EXPECT_EQ(&j, &job);
  });
  EXPECT_FALSE(job.SetState(JobState::kSucceeded, "too early"));  // PENDING cannot succeed
  EXPECT_EQ(job.state(), JobState::kPending);
  EXPECT_EQ(observed, 0);
  const uint64_t version = job.version;
  EXPECT_TRUE(job.SetState(JobState::kStarting, "starting 1 rank"));
  EXPECT_EQ(job.status.reason, "starting 1 rank");
  EXPECT_EQ(job.version, version + 1);
  EXPECT_EQ(observed, 1);
  EXPECT_EQ(job.log.end() - job.log.begin(), 1);  // a status snapshot in the log
}

TEST(JobTest, EndingAsksToStopEveryAgentWithLiveRanksOnce) {
  JobRules rules;
  rules.kill_grace = 777ms;
  auto job = RunningJob(4, rules);
  job->stop_signal = 2;
  job->End(JobState::kCancelled, "cancelled: by a user", 130, At(5ms));
  EXPECT_EQ(job->state(), JobState::kCancelled);
  EXPECT_EQ(job->status.exit_code, 130);
  EXPECT_EQ(job->status.end_time_ms, kT0.wall_ms + 5);
  std::vector<Job::Stop> stops = job->TakeStops();
  ASSERT_EQ(stops.size(), 2u);
  EXPECT_EQ(stops[0].agent_id, "a");
  EXPECT_EQ(stops[1].agent_id, "b");
  EXPECT_EQ(stops[0].command.grace_ms, 777);
  EXPECT_EQ(stops[0].command.signal, 2);
  EXPECT_EQ(stops[0].command.reason, "cancelled: by a user");
  EXPECT_TRUE(job->TakeStops().empty());
  // Ended is ended: a second end changes nothing; finished only once no rank is left.
  job->End(JobState::kFailed, "late", 1, At(6ms));
  EXPECT_EQ(job->state(), JobState::kCancelled);
  EXPECT_FALSE(job->Finish());
  job->KillRanksOnAgent("a", "stopped", kT0.wall_ms);
  EXPECT_FALSE(job->Finish());
  EXPECT_EQ(job->KillRanksOnAgent("b", "stopped", kT0.wall_ms), (std::vector<int>{2, 3}));
  EXPECT_TRUE(job->Finish());
  EXPECT_TRUE(job->finished);
  EXPECT_FALSE(job->Finish());
}

TEST(JobTest, SuccessStopsNoAgent) {
  auto job = RunningJob(2);
  for (int r = 0; r < 2; ++r) {
    RankEventReport ev;
    ev.job_id = "j1";
    ev.rank = r;
    ev.state = RankState::kExited;
    EXPECT_TRUE(job->OnRankEvent(ev, r < 1 ? "a" : "b", kAllConnected, At(1ms)));
  }
  EXPECT_EQ(job->state(), JobState::kSucceeded);
  EXPECT_EQ(job->status.reason, "all 2 ranks exited with code 0");
  EXPECT_TRUE(job->TakeStops().empty());
  EXPECT_TRUE(job->Finish());
}

TEST(JobTest, TheFirstFailureIsTheCause) {
  auto job = RunningJob(2);
  job->Fail(RankExit(*job, 1, 3), 3, At(1ms));
  job->Fail(RankExit(*job, 0, 4), 4, At(2ms));
  EXPECT_EQ(job->state(), JobState::kFailed);
  EXPECT_EQ(job->status.failure.rank, 1);
  EXPECT_EQ(job->status.exit_code, 3);
  EXPECT_EQ(job->status.reason, "rank 1 exited with code 3");
}

TEST(JobTest, AFailureRestartsTheJobAsANewAttemptOnceItsRanksAreGone) {
  JobRules rules;
  rules.restart.base_delay = 1000ms;
  auto job = RunningJob(2, rules, /*max_restarts=*/2);
  job->Fail(RankExit(*job, 0, 3), 3, At(0ms));
  EXPECT_EQ(job->state(), JobState::kRestarting);
  EXPECT_EQ(job->status.previous_failures.size(), 1u);
  EXPECT_EQ(job->TakeStops().size(), 2u);
  EXPECT_FALSE(job->RestartDue(At(0ms).steady));  // ranks still live
  job->Fail(RankExit(*job, 1, 9), 9, At(1ms));    // the echo of the first
  EXPECT_EQ(job->status.previous_failures.size(), 1u);
  job->KillRanksOnAgent("a", "gone", 0);
  job->KillRanksOnAgent("b", "gone", 0);
  EXPECT_TRUE(job->RestartDue(At(1ms).steady));  // the first restart is at once
  job->NextAttempt(At(2ms));
  EXPECT_EQ(job->state(), JobState::kPending);
  EXPECT_EQ(job->status.attempt, 1);
  EXPECT_TRUE(job->status.ranks.empty());
  EXPECT_EQ(job->status.queued_since_ms, kT0.wall_ms + 2);
  EXPECT_EQ(job->status.reason, "attempt 2 of 3: waiting for placement");

  // The second restart waits for the back-off.
  job->SetState(JobState::kStarting, "starting");
  job->Fail(JobFailure{0, "h-a", 1, 0, "", "rank 0 failed"}, 1, At(10ms));
  EXPECT_EQ(job->state(), JobState::kRestarting);
  EXPECT_FALSE(job->RestartDue(At(1009ms).steady));
  EXPECT_TRUE(job->RestartDue(At(1010ms).steady));
}

TEST(JobTest, APermanentFailureIsNeverRestarted) {
  auto job = RunningJob(2, {}, /*max_restarts=*/3);
  JobFailure f;
  f.message = "cannot place the job: np=9 but 4 slots";
  job->Fail(f, 1, At(0ms), /*permanent=*/true);
  EXPECT_EQ(job->state(), JobState::kFailed);
  EXPECT_EQ(job->status.reason, "cannot place the job: np=9 but 4 slots");
}

TEST(JobTest, AFailureBlamedOnAPeerWaitsForThePeersOwn) {
  JobRules rules;
  rules.cause_settle = 1000ms;
  auto job = RunningJob(4, rules);
  job->NotePeerFailed(3);
  job->RankFailed(RankExit(*job, 3, 1), 1, kT0.wall_ms + 50, kAllConnected, At(0ms));
  EXPECT_EQ(job->state(), JobState::kRunning);  // held
  EXPECT_TRUE(job->holds_failure());
  EXPECT_FALSE(job->HeldDue(At(999ms).steady));
  // The peer's own failure, though reported later and dying later, is the cause.
  job->RankFailed(RankExit(*job, 1, 7), 7, kT0.wall_ms + 60, kAllConnected, At(10ms));
  EXPECT_EQ(job->state(), JobState::kFailed);
  EXPECT_EQ(job->status.failure.rank, 1);
  EXPECT_FALSE(job->holds_failure());
}

TEST(JobTest, AHeldFailureBecomesTheCauseWhenNothingBetterComes) {
  JobRules rules;
  rules.cause_settle = 1000ms;
  auto job = RunningJob(2, rules);
  // Rank 1 exited with code 0 while rank 0 still waited for it: rank 0's failure is the cause,
  // and says what its runtime said of rank 1.
  job->NotePeerFailed(0, "rank 1 shut hvd down while rank 0 still used it");
  job->RankFailed(RankExit(*job, 0, 1), 1, kT0.wall_ms, kAllConnected, At(0ms));
  EXPECT_TRUE(job->HeldDue(At(1000ms).steady));
  job->ReleaseHeld(At(1000ms));
  EXPECT_EQ(job->state(), JobState::kFailed);
  EXPECT_EQ(job->status.failure.rank, 0);
  EXPECT_HAS(job->status.reason,
             " after its runtime reported: rank 1 shut hvd down while rank 0 still used it");
}

// A key failed after HVD_STALL_SHUTDOWN_TIME_SECONDS: rank 0, which waited for rank 1, fails;
// rank 1 never does (it is stuck in user code). The stall is the cause, naming rank 1, not the
// rank that waited; once rank 1 is gone too, rank 0's own failure is (with what it reported).
TEST(JobTest, AFailureHeldWhileTheJobStandsStalledNamesTheStalledRank) {
  JobRules rules;
  rules.cause_settle = 1000ms;
  for (bool stalled_rank_gone : {false, true}) {
    auto job = RunningJob(2, rules);
    StallReport report;
    report.kind = StallReport::Kind::kInspector;
    report.age_s = 4;
    report.blamed = {1};
    report.message = "rank 1 on " + job->status.ranks[1].placement.host +
                     " has not submitted allreduce 'x' for 4 s (rank 0 has); the operation "
                     "failed on that rank after HVD_STALL_SHUTDOWN_TIME_SECONDS=4";
    job->stalls[0] = {report, At(0ms).steady};
    job->status.stall = report.message;
    job->NotePeerFailed(0, "stalled: rank 1 has not submitted allreduce 'x' for 4 s (rank 0 has)");
    if (stalled_rank_gone) job->status.ranks[1].state = RankState::kExited;  // with code 0
    job->RankFailed(RankExit(*job, 0, 3), 3, kT0.wall_ms + 10, kAllConnected, At(10ms));
    EXPECT_TRUE(job->holds_failure());
    job->ReleaseHeld(At(1010ms));
    ASSERT_EQ(job->state(), JobState::kFailed);
    if (stalled_rank_gone) {
      EXPECT_EQ(job->status.failure.rank, 0);
      EXPECT_EQ(job->status.exit_code, 3);
      EXPECT_HAS(job->status.reason, "after its runtime reported: stalled: rank 1 has not");
      continue;
    }
    EXPECT_EQ(job->status.failure.rank, 1);
    EXPECT_EQ(job->status.failure.host, job->status.ranks[1].placement.host);
    EXPECT_EQ(job->status.exit_code, 1);
    EXPECT_HAS(job->status.reason,
               "stalled: " + report.message + "; then rank 0 exited with code 3");
  }
}

// The launcher was away while the ranks ended (its agents ended them past the lease, or they
// finished): their exits come when it is back, 34 s later. The job ended with its last rank; its
// end time (and "ran: ...") said 41 s.
TEST(JobTest, RanksReportedLateEndTheJobWhenTheyEnded) {
  auto job = RunningJob(2);
  job->status.start_time_ms = kT0.wall_ms;
  for (int r = 0; r < 2; ++r) {
    RankEventReport ev;
    ev.job_id = "j1";
    ev.rank = r;
    ev.state = RankState::kExited;
    ev.time_ms = kT0.wall_ms + 7000 + r;
    EXPECT_TRUE(
        job->OnRankEvent(ev, job->status.ranks[r].placement.agent_id, kAllConnected, At(41000ms)));
  }
  ASSERT_EQ(job->state(), JobState::kSucceeded);
  EXPECT_EQ(job->status.end_time_ms, kT0.wall_ms + 7001);
  // A job that ends while ranks still run ends now.
  auto failing = RunningJob(2);
  failing->RankFailed(RankExit(*failing, 0, 3), 3, kT0.wall_ms + 50, kAllConnected, At(60ms));
  ASSERT_EQ(failing->state(), JobState::kFailed);
  EXPECT_EQ(failing->status.end_time_ms, At(60ms).wall_ms);
}

// A rank that recorded failing because of a peer, then went on (it caught a stall's error, or a
// new session of it started): its runtime withdraws the record, and its own failure is a cause
// again, not held for another's.
TEST(JobTest, AWithdrawnPeerFailureIsNoLongerHeld) {
  JobRules rules;
  rules.cause_settle = 1000ms;
  auto job = RunningJob(2, rules);
  job->NotePeerFailed(0, "stalled: rank 1 has not submitted allreduce 'x' for 4 s (rank 0 has)");
  job->PeerFailureWithdrawn(0);
  job->RankFailed(RankExit(*job, 0, 3), 3, kT0.wall_ms, kAllConnected, At(0ms));
  EXPECT_FALSE(job->holds_failure());
  ASSERT_EQ(job->state(), JobState::kFailed);
  EXPECT_EQ(job->status.failure.rank, 0);
  EXPECT_EQ(job->status.reason.find("after its runtime reported"), std::string::npos)
      << job->status.reason;
}

TEST(JobTest, WhatARankReportedOfItsPeerIsOneLineOfPrintableText) {
  JobRules rules;
  rules.cause_settle = 1000ms;
  auto job = RunningJob(2, rules);
  job->NotePeerFailed(0, "peer \xff\x1b[2J gone\nfor good" + std::string(600, 'x'));
  job->RankFailed(RankExit(*job, 0, 1), 1, kT0.wall_ms, kAllConnected, At(0ms));
  job->ReleaseHeld(At(1000ms));
  const std::string& reason = job->status.reason;
  EXPECT_HAS(reason, "after its runtime reported: peer \\xff\\x1b[2J gone\\nfor good");
  EXPECT_HAS(reason, "more bytes)");  // cut
  EXPECT_EQ(reason.find('\n'), std::string::npos) << reason;
  EXPECT_EQ(reason.find('\x1b'), std::string::npos) << reason;
  EXPECT_LT(reason.size(), 600u) << reason;
}

TEST(JobTest, AnEarlierDeathReplacesTheCauseUntilTheJobFinishes) {
  auto job = RunningJob(4);
  job->RankFailed(RankExit(*job, 2, 1), 1, kT0.wall_ms + 200, kAllConnected, At(0ms));
  EXPECT_EQ(job->status.failure.rank, 2);
  job->RankFailed(RankExit(*job, 0, 5), 5, kT0.wall_ms + 100, kAllConnected, At(1ms));
  EXPECT_EQ(job->status.failure.rank, 0);
  EXPECT_EQ(job->status.exit_code, 5);
  job->RankFailed(RankExit(*job, 3, 6), 6, kT0.wall_ms + 300, kAllConnected, At(2ms));
  EXPECT_EQ(job->status.failure.rank, 0);  // a later death does not
  job->KillRanksOnAgent("a", "stopped", 0);
  job->KillRanksOnAgent("b", "stopped", 0);
  ASSERT_TRUE(job->Finish());
  job->RankFailed(RankExit(*job, 1, 8), 8, kT0.wall_ms + 1, kAllConnected, At(3ms));
  EXPECT_EQ(job->status.failure.rank, 0);  // finished: the record stands
}

TEST(JobTest, ARankDyingWhileItsPeersAgentIsAwayNamesTheAgent) {
  auto job = RunningJob(4);
  bool b_up = true;
  const AgentConnected connected = [&](const std::string& id) { return id != "b" || b_up; };
  b_up = false;
  EXPECT_FALSE(job->AgentDropped("b", connected, At(0ms)));  // nothing failed yet
  job->RankFailed(RankExit(*job, 0, 1), 1, kT0.wall_ms, connected, At(1ms));
  EXPECT_EQ(job->state(), JobState::kFailed);
  EXPECT_EQ(job->status.failure.rank, 2);
  EXPECT_EQ(job->status.failure.host, "h-b");
  EXPECT_EQ(job->status.failure.message.rfind("agent on h-b lost (agent b dropped", 0), 0u)
      << job->status.failure.message;
}

TEST(JobTest, AnAgentDroppingJustAfterARankExitBecomesTheCause) {
  JobRules rules;
  rules.cause_settle = 1000ms;
  auto job = RunningJob(4, rules);
  job->RankFailed(RankExit(*job, 0, 1), 1, kT0.wall_ms, kAllConnected, At(0ms));
  ASSERT_EQ(job->status.failure.rank, 0);
  const AgentConnected b_gone = [](const std::string& id) { return id != "b"; };
  EXPECT_FALSE(job->AgentDropped("b", b_gone, At(500ms)));  // replaced, nothing to settle
  EXPECT_EQ(job->status.failure.host, "h-b");
  EXPECT_EQ(job->status.reason, job->status.failure.message);

  // Past cause_settle the rank's exit stands.
  auto late = RunningJob(4, rules);
  late->RankFailed(RankExit(*late, 0, 1), 1, kT0.wall_ms, kAllConnected, At(0ms));
  late->AgentDropped("b", b_gone, At(1500ms));
  EXPECT_EQ(late->status.failure.rank, 0);
}

TEST(JobTest, RankEventsFromTheWrongAgentOrRepeatedAreIgnored) {
  auto job = RunningJob(2);
  RankEventReport ev;
  ev.job_id = "j1";
  ev.rank = 1;
  ev.state = RankState::kExited;
  ev.exit_code = 3;
  EXPECT_FALSE(job->OnRankEvent(ev, "a", kAllConnected, At(0ms)));  // rank 1 runs on b
  EXPECT_EQ(job->state(), JobState::kRunning);
  EXPECT_TRUE(job->OnRankEvent(ev, "b", kAllConnected, At(0ms)));
  EXPECT_EQ(job->state(), JobState::kFailed);
  EXPECT_EQ(job->status.exit_code, 3);
  EXPECT_FALSE(job->OnRankEvent(ev, "b", kAllConnected, At(1ms)));  // repeated
}

}  // namespace
}  // namespace hvd::launcherd
