// Supervisor on its own (launcherd/job_supervision.h): every timer at the instant just before and
// at its limit, with the clock the test passes in. No JobManager, no sleeping.
#include "launcherd/job_supervision.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "supervisor_fixture.h"
#include "test_clock.h"

namespace hvd::launcherd {
namespace {

using namespace std::chrono_literals;

using testing::At;
using testing::kConnected;
using testing::kT0;
using testing::Event;
using testing::Options;
using testing::StartedJob;
using testing::NewJob;

TEST(SupervisorTest, StartTimeoutNamesTheRanksThatNeverArrived) {
  const Supervisor sup(Options());
  auto job = StartedJob(3);
  job->status.spec.start_timeout_ms = 2000;
  sup.RankAtRendezvous(*job, 1, At(100ms));
  EXPECT_EQ(job->at_rendezvous, 1);
  EXPECT_EQ(sup.Check(*job, At(1999ms), kConnected), Supervisor::Next::kNothing);
  EXPECT_EQ(job->state(), JobState::kStarting);
  EXPECT_EQ(sup.Check(*job, At(2000ms), kConnected), Supervisor::Next::kSettle);
  EXPECT_EQ(job->state(), JobState::kFailed);
  EXPECT_EQ(job->status.failure.rank, 0);
  const std::string& m = job->status.failure.message;
  EXPECT_EQ(m.rfind("ranks 0, 2 did not reach the rendezvous within 2.0 s", 0), 0u) << m;
  EXPECT_NE(m.find("rank 0 on h: its agent a never reported it started"), std::string::npos) << m;
  EXPECT_EQ(m.find("--start-timeout 0"), std::string::npos) << "rank 1 did call hvd.init(): " << m;
  EXPECT_EQ(job->TakeStops().size(), 1u);
  // Nobody arrived: the program may not use hvd, and the message says what then.
  auto none = StartedJob(2);
  none->status.spec.start_timeout_ms = 2000;
  EXPECT_EQ(sup.Check(*none, At(2000ms), kConnected), Supervisor::Next::kSettle);
  EXPECT_NE(none->status.failure.message.find(
                ". A program that does not use hvd needs --start-timeout 0"),
            std::string::npos)
      << none->status.failure.message;
}

// An elastic job whose --min-np workers met goes on without the late ones: they are stopped,
// not the job. Below --min-np it fails as a fixed job does.
TEST(SupervisorTest, AnElasticJobLeavesOutWorkersLateForTheStartTimeout) {
  const Supervisor sup(Options());
  // min_np 3: too few met. 4: worker 2 STARTING, not known to run (a stop may find nothing).
  for (int min_np : {2, 3, 4}) {
    SCOPED_TRACE(min_np);
    auto job = StartedJob(3);
    job->status.spec.start_timeout_ms = 2000;
    job->status.spec.min_np = min_np == 4 ? 2 : min_np;
    job->status.spec.max_np = 3;
    job->ElasticBegin(kT0);
    job->status.ranks[2].state = min_np == 4 ? RankState::kStarting : RankState::kRunning;
    job->status.ranks[2].pid = 42;
    sup.RankAtRendezvous(*job, 0, At(100ms));
    sup.RankAtRendezvous(*job, 1, At(100ms));
    EXPECT_EQ(sup.Check(*job, At(2000ms), kConnected), Supervisor::Next::kSettle);
    std::vector<Job::Stop> stops = job->TakeStops();
    ASSERT_EQ(stops.size(), 1u);
    if (min_np != 2) {
      EXPECT_EQ(job->state(), JobState::kFailed);
      EXPECT_TRUE(stops[0].command.ranks.empty());  // the whole job
      continue;
    }
    EXPECT_EQ(job->state(), JobState::kStarting);
    EXPECT_EQ(stops[0].command.ranks, std::vector<int>{2});
    EXPECT_EQ(job->status.elastic.events.back().what,
              "worker 2 on h is being removed: it did not reach hvd.init() within 2.0 s "
              "(--start-timeout; running as pid 42 but never called hvd.init() (hvd::Init())) "
              "while 2 workers "
              "did; stopped by the launcher");
    // Once asked, not again.
    EXPECT_EQ(sup.Check(*job, At(3000ms), kConnected), Supervisor::Next::kNothing);
    EXPECT_TRUE(job->TakeStops().empty());
  }
}

// An elastic job of `np` workers, all RUNNING since kT0, with this start timeout and --min-np,
// --max-np.
std::unique_ptr<Job> RunningElasticJob(int np, int64_t start_timeout_ms, int min_np, int max_np) {
  auto job = StartedJob(np);
  job->status.spec.start_timeout_ms = start_timeout_ms;
  job->status.spec.min_np = min_np;
  job->status.spec.max_np = max_np;
  job->ElasticBegin(kT0);
  for (int r = 0; r < np; ++r) Event(*job, r, RankState::kRunning, kT0);
  return job;
}

// Elastic worker `id` added by growth at `added` (appended to the ranks, as the scheduler does,
// and in the next generation) and reported RUNNING at `running`.
void AddWorker(Job& job, int id, Instant added, Instant running) {
  RankStatus r = job.status.ranks[0];
  r.placement.rank = id;
  r.state = RankState::kStarting;
  r.rendezvous_time_ms = 0;
  job.status.ranks.push_back(r);
  job.ElasticGrew({id}, added);
  Event(job, id, RankState::kRunning, running);
}

// A worker added by growth has the start timeout from when it runs and is a member of a
// generation, whichever came later: one that hangs before hvd.init() is removed (the others
// wait for it at their meeting); one that met in time is not. Its arrival is read from a later
// generation's meeting, by its index in that generation's members (not its id).
TEST(SupervisorTest, AWorkerAddedLaterHasTheStartTimeoutFromWhenItWasAdded) {
  const Supervisor sup(Options());
  for (const char* variant : {"late", "met"}) {
    SCOPED_TRACE(variant);
    auto job = RunningElasticJob(2, 2000, 1, 3);
    sup.RankAtRendezvous(*job, 0, At(100ms));
    sup.RankAtRendezvous(*job, 1, At(100ms));
    Event(*job, 1, RankState::kExited, At(1s), 1);  // generation 1: {0}
    AddWorker(*job, 2, At(4s), At(5s));             // generation 2: {0, 2}; RUNNING a second later
    ASSERT_EQ(job->status.elastic.workers, (std::vector<int>{0, 2}));
    EXPECT_EQ(job->MeetingWorker(2, 1), 2);
    EXPECT_EQ(job->MeetingWorker(1, 1), -1);  // generation 1 had one member
    EXPECT_EQ(job->MeetingWorker(0, 1), 1);   // older generations are still known
    if (std::string(variant) == "met") sup.RankAtRendezvous(*job, job->MeetingWorker(2, 1), At(6s));
    EXPECT_EQ(job->at_rendezvous, 2) << "a worker added later is not one of the first np";
    // 2 s from worker 2's start (it ran after it was added), not from the attempt's.
    EXPECT_EQ(sup.Check(*job, At(6999ms), kConnected), Supervisor::Next::kNothing);
    EXPECT_TRUE(job->TakeStops().empty());
    const Supervisor::Next next = sup.Check(*job, At(7000ms), kConnected);
    std::vector<Job::Stop> stops = job->TakeStops();
    if (std::string(variant) == "met") {
      EXPECT_EQ(next, Supervisor::Next::kNothing);
      EXPECT_TRUE(stops.empty());
      continue;
    }
    EXPECT_EQ(next, Supervisor::Next::kSettle);
    ASSERT_EQ(stops.size(), 1u);
    EXPECT_EQ(stops[0].command.ranks, std::vector<int>{2});
    EXPECT_EQ(job->status.elastic.events.back().what,
              "worker 2 on h is being removed: it did not reach hvd.init() within 2.0 s of being "
              "added to the job (--start-timeout; running as pid 42 but never met the other "
              "workers); stopped by the launcher");
    EXPECT_EQ(sup.Check(*job, At(8000ms), kConnected), Supervisor::Next::kNothing);
  }
}

// After a launcher restart a worker added before it has no times (kept in memory only) and is not
// judged; one added after it is.
TEST(SupervisorTest, AfterALauncherRestartOnlyWorkersAddedSinceAreTimed) {
  const Supervisor sup(Options());
  auto job = RunningElasticJob(2, 2000, 1, 4);
  for (int r : {0, 1}) sup.RankAtRendezvous(*job, r, At(100ms));
  AddWorker(*job, 2, At(1s), At(1s));
  // The launcher restarts: a job rebuilt from its record, as JobManager::Restore does.
  auto restored = NewJob(2);
  restored->status = job->status;
  restored->RanksReplaced();
  restored->rendezvous_restored = true;
  restored->attempt_started = At(2s).steady;
  restored->ElasticRestored(At(2s));
  EXPECT_EQ(sup.Check(*restored, At(10s), kConnected), Supervisor::Next::kNothing);
  EXPECT_TRUE(restored->TakeStops().empty()) << "worker 2 has no times since the restart";
  AddWorker(*restored, 3, At(10s), At(10s));
  EXPECT_EQ(sup.Check(*restored, At(11999ms), kConnected), Supervisor::Next::kNothing);
  EXPECT_EQ(sup.Check(*restored, At(12s), kConnected), Supervisor::Next::kSettle);
  std::vector<Job::Stop> stops = restored->TakeStops();
  ASSERT_EQ(stops.size(), 1u);
  EXPECT_EQ(stops[0].command.ranks, std::vector<int>{3});
}

// The first workers' start timeout with --min-np not met yet, while a worker added later may
// still come within its own time: decided when it comes (the late first worker is removed) or its
// time runs out (the job fails, naming it too).
TEST(SupervisorTest, TheFirstWorkersWaitForANewcomerThatMayStillMakeMinNp) {
  const Supervisor sup(Options());
  for (const char* variant : {"comes", "never"}) {
    SCOPED_TRACE(variant);
    auto job = RunningElasticJob(2, 5000, 2, 3);
    sup.RankAtRendezvous(*job, 0, At(1s));  // worker 1 is late
    AddWorker(*job, 2, At(500ms), At(500ms));
    EXPECT_EQ(sup.Check(*job, At(5s), kConnected), Supervisor::Next::kNothing);
    EXPECT_EQ(job->state(), JobState::kRunning);
    EXPECT_TRUE(job->TakeStops().empty());
    if (std::string(variant) == "comes") {
      sup.RankAtRendezvous(*job, 2, At(5200ms));
      EXPECT_EQ(sup.Check(*job, At(5200ms), kConnected), Supervisor::Next::kSettle);
      std::vector<Job::Stop> stops = job->TakeStops();
      ASSERT_EQ(stops.size(), 1u);
      EXPECT_EQ(stops[0].command.ranks, std::vector<int>{1});
      continue;
    }
    EXPECT_EQ(sup.Check(*job, At(5500ms), kConnected), Supervisor::Next::kSettle);
    EXPECT_EQ(job->state(), JobState::kFailed);
    const std::string& m = job->status.failure.message;
    EXPECT_EQ(m.rfind("rank 1 did not reach the rendezvous within 5.0 s (--start-timeout); rank 1 "
                      "on h: running as pid 41 but never called hvd.init() (hvd::Init()); worker "
                      "2, added later, not there either",
                      0),
              0u)
        << m;
    EXPECT_EQ(m.find("does not use hvd"), std::string::npos) << "worker 0 did call hvd.init()";
  }
}

TEST(SupervisorTest, TheDefaultStartTimeoutIsWaivedForAProgramWithoutHvd) {
  const Supervisor sup(Options());
  auto job = StartedJob(2);  // spec start_timeout_ms -1: the launcher's 30 s
  EXPECT_EQ(sup.Check(*job, At(30s), kConnected), Supervisor::Next::kNothing);
  EXPECT_EQ(job->state(), JobState::kStarting);
  EXPECT_TRUE(job->start_timeout_waived);
  EXPECT_EQ(sup.Check(*job, At(300s), kConnected), Supervisor::Next::kNothing);
  EXPECT_EQ(job->state(), JobState::kStarting);
  // With --stall-timeout, or elastic, the log says those do nothing for such a program.
  auto stalls = StartedJob(2);
  stalls->status.spec.stall_timeout_ms = 15000;
  EXPECT_EQ(sup.Check(*stalls, At(30s), kConnected), Supervisor::Next::kNothing);
  const JobLog& log = stalls->log;
  ASSERT_GT(log.end(), log.begin());
  const std::string said = log.at(log.end() - 1).progress;
  EXPECT_NE(said.find("supervising the job as a program that does not use hvd"), std::string::npos)
      << said;
  EXPECT_NE(said.find("; --stall-timeout has no effect: it times hvd's collectives"),
            std::string::npos)
      << said;
  // An elastic job taken for a program without hvd cannot re-form: a loss fails it, as a fixed
  // job's, and it does not grow (the others would wait in torch's collectives).
  auto elastic = StartedJob(2);
  elastic->status.spec.min_np = 1;
  elastic->status.spec.max_np = 4;
  elastic->ElasticBegin(kT0);
  Event(*elastic, 0, RankState::kRunning, kT0);
  Event(*elastic, 1, RankState::kRunning, kT0);
  EXPECT_TRUE(elastic->ReForms());
  EXPECT_EQ(sup.Check(*elastic, At(30s), kConnected), Supervisor::Next::kNothing);
  EXPECT_FALSE(elastic->ReForms());
  EXPECT_FALSE(elastic->ElasticWantsWorkers());
  const JobLog& elog = elastic->log;
  EXPECT_NE(elog.at(elog.end() - 1).progress.find("from now on a lost worker fails the job"),
            std::string::npos);
  Event(*elastic, 1, RankState::kExited, At(31s), 3);
  EXPECT_EQ(elastic->state(), JobState::kFailed);
  EXPECT_EQ(elastic->status.exit_code, 3);
  EXPECT_EQ(elastic->status.failure.message, "rank 1 on h exited with code 3");
}

TEST(SupervisorTest, AnAttachedJobIsCancelledOnceItsClientIsGoneForTheLease) {
  const Supervisor sup(Options());
  auto job = StartedJob(1);
  job->status.spec.detached = false;
  job->status.spec.start_timeout_ms = 0;
  sup.WatchStarted(*job);
  EXPECT_EQ(sup.Check(*job, At(60s), kConnected), Supervisor::Next::kNothing);  // watched
  sup.WatchEnded(*job, At(60s));
  EXPECT_EQ(sup.Check(*job, At(65s), kConnected), Supervisor::Next::kNothing);
  EXPECT_EQ(sup.Check(*job, At(65001ms), kConnected), Supervisor::Next::kSettle);
  EXPECT_EQ(job->state(), JobState::kCancelled);
  EXPECT_EQ(job->status.reason.rfind(
                "cancelled: the hvdrun that submitted it attached went away 5.0 s ago", 0),
            0u)
      << job->status.reason;
}

TEST(SupervisorTest, QueueTimeoutCountsOnlyTheTimeWaitingForSlots) {
  const Supervisor sup(Options());
  auto job = NewJob(1);
  job->status.spec.queue_timeout_ms = 500;
  job->status.reason = "needs 1 slot; no agent registered";
  EXPECT_EQ(sup.Check(*job, At(499ms), kConnected), Supervisor::Next::kNothing);
  job->placing.emplace();  // placed, in a step before the start: not waiting for slots
  EXPECT_EQ(sup.Check(*job, At(900ms), kConnected), Supervisor::Next::kNothing);
  job->placing.reset();
  EXPECT_EQ(sup.Check(*job, At(500ms), kConnected), Supervisor::Next::kSettle);
  EXPECT_EQ(job->state(), JobState::kFailed);
  EXPECT_EQ(job->status.failure.message,
            "waited 0.5 s for slots (--queue-timeout 0.5 s): needs 1 slot; no agent registered");
}

TEST(SupervisorTest, MasterPortDeadlineFailsASilentAgentNotAGoneOne) {
  const Supervisor sup(Options());
  auto ask = [](Job& job) {
    job.placing.emplace();
    job.placing->master_port.request_id = "r1";
    job.placing->master_port.agent_id = "a";
    job.placing->master_port.host = "h";
    job.placing->master_port.deadline = kT0.steady + 1s;
  };
  auto silent = NewJob(1);
  ask(*silent);
  EXPECT_EQ(sup.Check(*silent, At(999ms), kConnected), Supervisor::Next::kNothing);
  EXPECT_EQ(sup.Check(*silent, At(1000ms), kConnected), Supervisor::Next::kSettle);
  EXPECT_EQ(silent->state(), JobState::kFailed);
  EXPECT_EQ(silent->status.failure.message.rfind(
                "rank 0's agent a on h did not choose MASTER_PORT within 1.0 s", 0),
            0u)
      << silent->status.failure.message;

  auto gone = NewJob(1);
  ask(*gone);
  const AgentConnected none = [](const std::string&) { return false; };
  EXPECT_EQ(sup.Check(*gone, At(5s), none), Supervisor::Next::kSchedule);
  EXPECT_EQ(gone->state(), JobState::kPending);
  EXPECT_TRUE(gone->placing->master_port.request_id.empty());  // asked afresh when placed
}

// A busy launcher read the agent's answer in time but has not applied it: the deadline waits for
// what arrived before it, then judges the agent (issue 22: 14-60 of 100 jobs failed so at 1,000
// agents, the answers having been read in 37 ms and applied seconds later).
TEST(SupervisorTest, MasterPortDeadlineWaitsForTheLaunchersOwnBacklog) {
  const Supervisor sup(Options());
  auto job = NewJob(1);
  job->placing.emplace();
  job->placing->master_port.request_id = "r1";
  job->placing->master_port.agent_id = "a";
  job->placing->master_port.host = "h";
  job->placing->master_port.deadline = kT0.steady + 1s;
  std::chrono::steady_clock::time_point oldest_unapplied = kT0.steady + 999ms;
  std::string asked_about;
  const AgentBacklog backlog = [&](const std::string& agent,
                                   std::chrono::steady_clock::time_point before) {
    asked_about = agent;
    return oldest_unapplied <= before;
  };
  EXPECT_EQ(sup.Check(*job, At(3s), kConnected, backlog), Supervisor::Next::kNothing);
  EXPECT_EQ(asked_about, "a");
  EXPECT_EQ(job->state(), JobState::kPending);
  // Everything read before the deadline is applied (what waits came after it): no answer came.
  oldest_unapplied = kT0.steady + 1001ms;
  EXPECT_EQ(sup.Check(*job, At(3s), kConnected, backlog), Supervisor::Next::kSettle);
  EXPECT_EQ(job->state(), JobState::kFailed);
}

TEST(SupervisorTest, AHeldCauseIsReleasedAtTheSettleTime) {
  const Supervisor sup(Options());
  JobRules rules;
  rules.cause_settle = 1s;
  auto job = std::make_unique<Job>(rules, 100, 1 << 20);
  job->status.id = "j1";
  job->status.spec.np = 2;
  job->status.spec.detached = true;
  job->status.spec.start_timeout_ms = 0;
  for (int r = 0; r < 2; ++r) {
    RankStatus rs;
    rs.placement.rank = r;
    rs.placement.agent_id = "a";
    rs.state = RankState::kRunning;
    job->status.ranks.push_back(rs);
  }
  job->SetState(JobState::kStarting, "starting");
  job->NotePeerFailed(1);
  JobFailure f;
  f.rank = 1;
  f.message = "rank 1 exited with code 1";
  job->RankFailed(f, 1, kT0.wall_ms, kConnected, At(0ms));
  EXPECT_EQ(sup.Check(*job, At(999ms), kConnected), Supervisor::Next::kNothing);
  EXPECT_EQ(job->state(), JobState::kStarting);
  EXPECT_EQ(sup.Check(*job, At(1000ms), kConnected), Supervisor::Next::kSettle);
  EXPECT_EQ(job->state(), JobState::kFailed);
  EXPECT_EQ(job->status.failure.rank, 1);
}

}  // namespace
}  // namespace hvd::launcherd
