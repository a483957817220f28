// An elastic job shrinking by its discovery script (launcherd/job_shrink.cc, docs/elastic.md
// "Shrinking"): which workers lie beyond the host list (a host left out, fewer slots, a host
// named by its agent's address), their stop and their end read as a removal that is not a
// failure (the slot stays usable, the host is not held against), and the wait until the worker
// that would be rank 0 after them holds the training state.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "job_elastic_fixture.h"
#include "launcherd/job_scheduler.h"
#include "testutil/expect.h"

namespace hvd::launcherd {
namespace {

using namespace std::chrono_literals;

using testing::At;
using testing::ElasticJob;
using testing::Ended;
using testing::Report;

const std::map<std::string, std::string> kAdvertise = {{"a", "addr-a"}, {"b", "addr-b"}};

std::string LastProgress(const Job& job) {
  for (int64_t i = job.log.end() - 1; i >= job.log.begin(); --i) {
    if (job.log.at(i).kind == JobLog::Entry::Kind::kProgress) return job.log.at(i).progress;
  }
  return "";
}

TEST(JobShrinkTest, WorkersBeyondTheListAreTheNewestOnEachHost) {
  auto job = ElasticJob(4, 1);  // workers 0, 1 on h-a; 2, 3 on h-b
  job->status.spec.hosts = {{"h-a", 2}, {"h-b", 2}};
  EXPECT_TRUE(job->WorkersBeyondHosts(kAdvertise).empty());

  job->status.spec.hosts = {{"h-a", 2}};
  EXPECT_EQ(job->WorkersBeyondHosts(kAdvertise),
            (std::map<int, std::string>{
                {2, "its host h-b is not in --host-discovery-script's list any more"},
                {3, "its host h-b is not in --host-discovery-script's list any more"}}));

  job->status.spec.hosts = {{"h-a", 1}, {"h-b", 4}};
  EXPECT_EQ(job->WorkersBeyondHosts(kAdvertise),
            (std::map<int, std::string>{
                {1,
                 "h-a has 1 slot in --host-discovery-script's list now, and 2 of the job's "
                 "workers"}}));

  // A list may name a host by the address its agent advertises.
  job->status.spec.hosts = {{"addr-b", 1}, {"h-a", 2}};
  EXPECT_EQ(job->WorkersBeyondHosts(kAdvertise).size(), 1u);
  EXPECT_EQ(job->WorkersBeyondHosts(kAdvertise).count(3), 1u);
}

TEST(JobShrinkTest, TheWorkersOfAHostLeftOutAreStoppedAndLeaveWithoutFailing) {
  auto job = ElasticJob(4, 1);
  job->TakePublications();
  job->status.spec.hosts = {{"h-a", 2}};
  ASSERT_TRUE(job->ShrinkTo(job->WorkersBeyondHosts(kAdvertise), At(1s)));
  EXPECT_FALSE(job->shrink_pending());
  std::vector<Job::Stop> stops = job->TakeStops();
  ASSERT_EQ(stops.size(), 1u);
  EXPECT_EQ(stops[0].agent_id, "b");
  EXPECT_EQ(stops[0].command.ranks, (std::vector<int>{2, 3}));
  EXPECT_HAS(stops[0].command.reason, "elastic workers 2, 3 left --host-discovery-script's list");
  EXPECT_EQ(job->status.elastic.events.back().what,
            "worker 3 on h-b is being removed: its host h-b is not in --host-discovery-script's "
            "list any more");

  Report(*job, Ended(2, RankState::kKilled), At(2s));
  Report(*job, Ended(3, RankState::kKilled), At(2s));
  EXPECT_EQ(job->state(), JobState::kRunning);
  EXPECT_EQ(job->status.elastic.workers, (std::vector<int>{0, 1}));
  const auto& events = job->status.elastic.events;
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events[events.size() - 2].what,
            "generation 1: worker 2 on h-b was removed: its host h-b is not in "
            "--host-discovery-script's list any more; worker 3, being removed too, left out; 2 "
            "workers go on");
  // Not failures: both slots may be used again, and two ends on h-b did not leave it out.
  EXPECT_EQ(job->DroppedSlotsOn("b"), 0);
  EXPECT_TRUE(job->ElasticSlotUsable("b", "h-b", 0, testing::kT0.steady + 3s));
  EXPECT_FALSE(job->HostLeftOutForGood("h-b"));
}

TEST(JobShrinkTest, NobodyIsStoppedUntilTheNextRankZeroHoldsTheState) {
  auto job = ElasticJob(2, 1);  // workers 0, 1 on h-a... and h-b (ElasticJob splits them)
  job->status.spec.max_np = 4;
  job->at_rendezvous = 2;
  for (int id : {2, 3}) {  // grown onto h-c
    RankStatus added = job->status.ranks[1];
    added.placement.rank = id;
    added.placement.agent_id = "c";
    added.placement.host = "h-c";
    added.state = RankState::kRunning;
    job->status.ranks.push_back(added);
  }
  job->ElasticGrew({2, 3}, At(1s));
  job->TakeStops();
  // The list now names only the new host: the workers started with the job would all go, and
  // the new ones have not committed (they may not have synced yet).
  job->status.spec.hosts = {{"h-c", 2}};
  const std::map<int, std::string> beyond = job->WorkersBeyondHosts(kAdvertise);
  EXPECT_EQ(beyond.size(), 2u);
  EXPECT_FALSE(job->ShrinkTo(beyond, At(2s)));
  EXPECT_TRUE(job->shrink_pending());
  EXPECT_TRUE(job->TakeStops().empty());
  const std::string said =
      "workers 0, 1 go on though --host-discovery-script's list has no room for them any more: "
      "worker 2, rank 0 after the stop, does not hold the training state yet (it joined later "
      "and has not committed); stopped once it does";
  EXPECT_EQ(job->status.elastic.events.back().what, said);
  EXPECT_EQ(LastProgress(*job), said);
  const size_t events = job->status.elastic.events.size();
  EXPECT_FALSE(job->ShrinkTo(beyond, At(3s)));  // said once
  EXPECT_EQ(job->status.elastic.events.size(), events);

  // Worker 3 committed, but worker 2 would be rank 0: the others would sync to its state.
  job->NoteCommitted(3);
  EXPECT_FALSE(job->ShrinkTo(beyond, At(4s)));
  EXPECT_TRUE(job->TakeStops().empty());
  job->NoteCommitted(2);
  EXPECT_TRUE(job->ShrinkTo(job->WorkersBeyondHosts(kAdvertise), At(5s)));
  EXPECT_FALSE(job->shrink_pending());
  size_t stopped = 0;
  for (const Job::Stop& s : job->TakeStops()) stopped += s.command.ranks.size();
  EXPECT_EQ(stopped, 2u);
}

TEST(JobShrinkTest, AListWithoutAnyOfTheJobsHostsStopsNobodyBeforeWorkersStartThere) {
  auto job = ElasticJob(2, 1);
  job->status.spec.hosts = {{"h-new", 2}};
  EXPECT_FALSE(job->ShrinkTo(job->WorkersBeyondHosts(kAdvertise), At(1s)));
  EXPECT_TRUE(job->shrink_pending());
  EXPECT_TRUE(job->TakeStops().empty());
  EXPECT_EQ(job->status.elastic.events.back().what,
            "workers 0, 1 go on though --host-discovery-script's list has no room for them any "
            "more: no other worker would stay; stopped once workers on the listed hosts hold the "
            "training state");
}

// With --max-np at the job's size (the default), the workers waiting to leave must not hold the
// places the listed hosts' workers need, or nothing would ever hold the state and stop them.
TEST(JobShrinkTest, WorkersWaitingToLeaveDoNotCountAgainstMaxNp) {
  auto job = ElasticJob(2, 1);  // --max-np 2
  EXPECT_FALSE(job->ElasticWantsWorkers());
  job->status.spec.hosts = {{"h-new", 2}};
  EXPECT_FALSE(job->ShrinkTo(job->WorkersBeyondHosts(kAdvertise), At(1s)));
  EXPECT_TRUE(job->ShrinkWaits(0));
  EXPECT_TRUE(job->ShrinkWaits(1));
  EXPECT_TRUE(job->ElasticWantsWorkers());
}

// Stopped because the list left it out, a worker is no failure however it ends: exiting on its
// own first (its host going down), or with its agent lost.
TEST(JobShrinkTest, AWorkerLeavingTheListIsNoFailureHoweverItEnds) {
  for (const bool agent_lost : {false, true}) {
    SCOPED_TRACE(agent_lost);
    auto job = ElasticJob(4, 1);
    job->status.spec.hosts = {{"h-a", 2}};
    ASSERT_TRUE(job->ShrinkTo(job->WorkersBeyondHosts(kAdvertise), At(1s)));
    EXPECT_TRUE(job->LeavingTheList(2));
    if (agent_lost) {
      const std::vector<int> lost = job->KillRanksOnAgent("b", "agent on h-b lost", 2000);
      ASSERT_EQ(lost, (std::vector<int>{2, 3}));
      JobFailure f;
      f.rank = 2;
      f.host = "h-b";
      f.message = "agent on h-b lost";
      job->WorkerLost(f, control::kGenericFailureExitCode, At(2s), /*agent_lost=*/true, lost);
    } else {
      Report(*job, Ended(2, RankState::kExited, 143), At(2s));
      Report(*job, Ended(3, RankState::kExited, 143), At(2s));
    }
    EXPECT_EQ(job->state(), JobState::kRunning);
    EXPECT_EQ(job->status.elastic.workers, (std::vector<int>{0, 1}));
    EXPECT_EQ(job->DroppedSlotsOn("b"), 0);
    EXPECT_FALSE(job->HostLeftOutForGood("h-b"));
    EXPECT_FALSE(job->LeavingTheList(2));
  }
}

// A worker grown while the job was below --min-np is in no published generation yet: the stop
// cannot reach it, and the shrink is tried again rather than forgotten.
TEST(JobShrinkTest, AWorkerNotYetInAGenerationKeepsTheShrinkPending) {
  auto job = ElasticJob(4, 4);
  job->status.spec.max_np = 5;
  Report(*job, Ended(2, RankState::kExited, 3), At(1s));
  Report(*job, Ended(3, RankState::kExited, 3), At(1s));
  RankStatus added = job->status.ranks[1];
  added.placement.rank = 4;
  added.placement.agent_id = "c";
  added.placement.host = "h-c";
  added.state = RankState::kRunning;
  job->status.ranks.push_back(added);
  job->ElasticGrew({4}, At(2s));  // 3 live, --min-np 4: not published
  job->status.spec.hosts = {{"h-a", 2}, {"h-b", 2}};
  EXPECT_FALSE(job->ShrinkTo(job->WorkersBeyondHosts(kAdvertise), At(3s)));
  EXPECT_TRUE(job->shrink_pending());
  // A generation with it (another worker joined): the next try stops it.
  added.placement.rank = 5;
  added.placement.agent_id = "b";
  added.placement.host = "h-b";
  job->status.ranks.push_back(added);
  job->ElasticGrew({5}, At(4s));
  ASSERT_EQ(job->status.elastic.workers, (std::vector<int>{0, 1, 4, 5}));
  job->TakeStops();
  EXPECT_TRUE(job->ShrinkTo(job->WorkersBeyondHosts(kAdvertise), At(5s)));
  EXPECT_FALSE(job->shrink_pending());
  std::vector<Job::Stop> stops = job->TakeStops();
  ASSERT_EQ(stops.size(), 1u);
  EXPECT_EQ(stops[0].command.ranks, (std::vector<int>{4}));
}

// Workers the listed hosts got while others waited to leave stay above --max-np if a later answer
// gives the others their room back: the newest go.
TEST(JobShrinkTest, WorkersAboveMaxNpOnTheListedHostsAreTheNewestBeyond) {
  auto job = ElasticJob(4, 1);  // --max-np 4
  job->status.spec.max_np = 3;
  job->status.spec.hosts = {{"h-a", 2}, {"h-b", 2}};
  EXPECT_EQ(job->WorkersBeyondHosts(kAdvertise),
            (std::map<int, std::string>{
                {3, "the job has 4 workers on the listed hosts, above --max-np 3"}}));
}

// After a launcher restart the stop's record is gone: the rank's error (the agent's stop
// reason) still says why it ended, and so does the record a restored job reads.
TEST(JobShrinkTest, AStopOfTheListReadsAsSuchWithoutItsRecord) {
  auto job = ElasticJob(4, 1);
  RankEventReport ev = Ended(3, RankState::kKilled);
  ev.error = std::string("stopped by the launcher: elastic worker 3 ") + Job::kLeftTheList;
  Report(*job, ev, At(1s));
  EXPECT_EQ(job->DroppedSlotsOn("b"), 0);

  auto restored = ElasticJob(4, 1);
  restored->status.spec.hosts = {{"h-a", 2}};  // the discovery script's last answer
  restored->status.ranks[3].state = RankState::kKilled;
  restored->status.ranks[3].error = ev.error;
  restored->status.ranks[2].state = RankState::kKilled;
  restored->status.ranks[2].error = "agent on h-b lost; it " + std::string(Job::kLeftTheList);
  restored->ElasticRestored(At(2s));
  EXPECT_EQ(restored->DroppedSlotsOn("b"), 0);
  EXPECT_FALSE(restored->HostLeftOutForGood("h-b"));
  EXPECT_TRUE(restored->shrink_pending());  // looked at again once its agents are back
}

// A local job's slot that a worker leaving the list frees is usable again: not stranded.
TEST(JobShrinkTest, ASlotTheListFreesCountsForGrowth) {
  auto job = ElasticJob(2, 2);  // 0 on h-a, 1 on h-b
  job->status.spec.hosts = {{"h-a", 1}};
  ASSERT_TRUE(job->ShrinkTo(job->WorkersBeyondHosts(kAdvertise), At(1s)));
  Scheduler::Pass pass;
  pass.agents.push_back({"a", "h-a", "addr-a", 1, {}, 0});
  pass.agents.push_back({"b", "h-b", "addr-b", 1, {}, 1});
  std::string why;
  EXPECT_TRUE(Scheduler::CouldGrow(*job, pass, &why)) << why;
}

TEST(JobShrinkTest, AFixedJobNeverShrinks) {
  auto job = testing::JobWithRanks(2, RankState::kRunning);
  job->status.spec.hosts = {{"elsewhere", 1}};
  EXPECT_TRUE(job->WorkersBeyondHosts(kAdvertise).empty());
  EXPECT_FALSE(job->ShrinkTo({{0, "why"}}, At(1s)));
  EXPECT_TRUE(job->TakeStops().empty());
}

}  // namespace
}  // namespace hvd::launcherd
