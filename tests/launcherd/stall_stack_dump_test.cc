// A stall's culprit is asked for its stacks (Supervisor::StallReport, Job::AskForStacks): the rank
// the stall ends at, on its own agent, once per stall; again only after the job made progress.
// With the clock the test passes in: no JobManager, no agents.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "control/job_model.h"
#include "launcherd/job_supervision.h"
#include "launcherd/stall_reports.h"
#include "supervisor_fixture.h"
#include "test_clock.h"

namespace hvd::launcherd {
namespace {

using namespace std::chrono_literals;

using testing::At;
using testing::StartedJob;

std::string WaitReport(double age_s, std::vector<int> blamed) {
  StallReport r;
  r.kind = StallReport::Kind::kWait;
  r.age_s = age_s;
  r.blamed = std::move(blamed);
  r.message = "allreduce grad.0";
  return FormatStallReport(r);
}

TEST(SupervisorTest, AStallAsksTheRankItEndsAtForItsStacksOnce) {
  const Supervisor sup(testing::Options());
  auto job = StartedJob(3);
  job->status.ranks[2].placement.agent_id = "b";
  job->status.ranks[2].placement.host = "h2";

  // Ranks 0 and 1 wait for rank 2: only rank 2 is asked, on its agent.
  sup.StallReport(*job, 0, WaitReport(1, {2}), At(0ms));
  std::vector<Job::StackDump> dumps = job->TakeStackDumps();
  ASSERT_EQ(dumps.size(), 1u);
  EXPECT_EQ(dumps[0].agent_id, "b");
  EXPECT_EQ(dumps[0].command.job_id, "j1");
  EXPECT_EQ(dumps[0].command.attempt, job->status.attempt);
  EXPECT_EQ(dumps[0].command.ranks, std::vector<int>{2});
  EXPECT_EQ(dumps[0].command.signal, control::kStackDumpSignal);
  EXPECT_EQ(dumps[0].command.reason, job->status.stall);

  // The stall grows older, or another rank reports it too: not asked again.
  sup.StallReport(*job, 0, WaitReport(3, {2}), At(2000ms));
  sup.StallReport(*job, 1, WaitReport(1, {2}), At(2100ms));
  EXPECT_TRUE(job->TakeStackDumps().empty());
  EXPECT_EQ(job->stacks_asked, std::set<int>{2});

  // Progress ends the stall; the next one asks again.
  sup.StallReport(*job, 0, "", At(3000ms));
  sup.StallReport(*job, 1, "", At(3000ms));
  EXPECT_TRUE(job->status.stall.empty());
  EXPECT_TRUE(job->stacks_asked.empty());
  sup.StallReport(*job, 1, WaitReport(1, {2}), At(9000ms));
  dumps = job->TakeStackDumps();
  ASSERT_EQ(dumps.size(), 1u);
  EXPECT_EQ(dumps[0].command.ranks, std::vector<int>{2});
}

// A report that blames many ranks (a coordinator missing half the job) asks the first four, not a
// flood of stacks into the job's capped log.
TEST(SupervisorTest, AStallAsksAtMostFourRanks) {
  const Supervisor sup(testing::Options());
  auto job = StartedJob(8);
  sup.StallReport(*job, 0, WaitReport(1, {1, 2, 3, 4, 5, 6, 7}), At(0ms));
  size_t asked = 0;
  for (const Job::StackDump& d : job->TakeStackDumps()) asked += d.command.ranks.size();
  EXPECT_EQ(asked, 4u);
  EXPECT_EQ(job->stacks_asked, (std::set<int>{1, 2, 3, 4}));
}

TEST(SupervisorTest, AStallAsksNoRankThatIsNotRunning) {
  const Supervisor sup(testing::Options());
  auto job = StartedJob(2);
  // A rank the job does not have (a report from a session of another size), and one that
  // exited: nothing to ask.
  sup.StallReport(*job, 0, WaitReport(1, {5}), At(0ms));
  EXPECT_FALSE(job->status.stall.empty());
  EXPECT_TRUE(job->TakeStackDumps().empty());
  sup.StallReport(*job, 0, "", At(100ms));
  job->status.ranks[1].state = RankState::kExited;
  sup.StallReport(*job, 0, WaitReport(1, {1}), At(200ms));
  EXPECT_FALSE(job->status.stall.empty());
  EXPECT_TRUE(job->TakeStackDumps().empty());
}

}  // namespace
}  // namespace hvd::launcherd
