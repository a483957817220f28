// Supervisor::CheckStallTimeout (launcherd/job_supervision.h): a fixed job fails naming the rank
// the stall ends at, with its last stderr lines; an elastic job removes that worker and goes on.
// With the clock the test passes in: no JobManager, no sleeping.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "launcherd/job_supervision.h"
#include "launcherd/stall_reports.h"
#include "supervisor_fixture.h"
#include "test_clock.h"

namespace hvd::launcherd {
namespace {

using namespace std::chrono_literals;

using testing::At;
using testing::Event;
using testing::kConnected;
using testing::kT0;
using testing::Options;
using testing::StartedJob;

TEST(SupervisorTest, StallTimeoutBlamesTheStalledRanksCulprit) {
  const Supervisor sup(Options());
  auto job = StartedJob(2);
  job->status.spec.stall_timeout_ms = 5000;
  job->status.spec.start_timeout_ms = 0;
  StallReport report;
  report.kind = StallReport::Kind::kWait;
  report.age_s = 1.0;  // already stalled for a second when written
  report.blamed = {1};
  report.message = "allreduce grad.0";
  // What the culprit wrote to stderr (its last 20 lines) is shown with the failure; not its
  // stdout, nor another rank's.
  for (int i = 0; i < 25; ++i) {
    job->log.AddOutput(OutputLine{1, true, "culprit line " + std::to_string(i), -1});
    job->log.AddOutput(OutputLine{1, false, "culprit stdout " + std::to_string(i), -1});
    job->log.AddOutput(OutputLine{0, true, "waiting rank line " + std::to_string(i), -1});
  }
  sup.StallReport(*job, 0, FormatStallReport(report), At(0ms));
  EXPECT_FALSE(job->status.stall.empty());
  EXPECT_EQ(job->status.stall_since_ms, kT0.wall_ms - 1000);
  EXPECT_EQ(sup.Check(*job, At(3999ms), kConnected), Supervisor::Next::kNothing);
  EXPECT_EQ(sup.Check(*job, At(4000ms), kConnected), Supervisor::Next::kSettle);
  EXPECT_EQ(job->state(), JobState::kFailed);
  EXPECT_EQ(job->status.failure.rank, 1);
  EXPECT_EQ(job->status.failure.message.rfind("stalled for 5 s (--stall-timeout 5 s): ", 0), 0u)
      << job->status.failure.message;
  std::string tail;
  for (int i = 5; i < 25; ++i) tail += (i > 5 ? "\n" : "") + ("culprit line " + std::to_string(i));
  EXPECT_EQ(job->status.failure.stderr_tail, tail);

  // A cleared stall is no longer timed.
  auto cleared = StartedJob(2);
  cleared->status.spec.stall_timeout_ms = 5000;
  cleared->status.spec.start_timeout_ms = 0;
  sup.StallReport(*cleared, 0, FormatStallReport(report), At(0ms));
  sup.StallReport(*cleared, 0, "", At(1000ms));
  EXPECT_TRUE(cleared->status.stall.empty());
  EXPECT_EQ(sup.Check(*cleared, At(60s), kConnected), Supervisor::Next::kNothing);
}

// An elastic job goes on without the worker its stall ends at (reports name workers by id): the
// launcher stops it once, the job does not fail, and the next generation clears the reports.
TEST(SupervisorTest, StallTimeoutRemovesAnElasticJobsStalledWorker) {
  const Supervisor sup(Options());
  auto job = StartedJob(3);
  job->status.spec.min_np = 1;
  job->status.spec.max_np = 3;
  job->status.spec.stall_timeout_ms = 5000;
  job->status.spec.start_timeout_ms = 0;
  job->ElasticBegin(kT0);
  for (int w = 0; w < 3; ++w) Event(*job, w, RankState::kRunning, kT0);
  // A chain: worker 1 waits for 0, which waits for 2 (reported first): 2 is the one removed.
  StallReport report;
  report.kind = StallReport::Kind::kWait;
  report.age_s = 1.0;
  report.blamed = {0};
  report.message = "allreduce grad.0";
  sup.StallReport(*job, 1, FormatStallReport(report), At(0ms));
  report.blamed = {2};
  sup.StallReport(*job, 0, FormatStallReport(report), At(0ms));
  EXPECT_EQ(sup.Check(*job, At(3999ms), kConnected), Supervisor::Next::kNothing);
  EXPECT_EQ(sup.Check(*job, At(4000ms), kConnected), Supervisor::Next::kSettle);
  EXPECT_NE(job->state(), JobState::kFailed);
  EXPECT_TRUE(job->BeingRemoved(2));
  EXPECT_FALSE(job->BeingRemoved(0));
  ASSERT_FALSE(job->status.elastic.events.empty());
  const std::string said = job->status.elastic.events.back().what;
  EXPECT_EQ(
      said.rfind("worker 2 on h is being removed: stalled for 5 s (--stall-timeout 5 s): ", 0), 0u)
      << said;
  // Stopping it takes a moment: no second removal, and no failure.
  EXPECT_EQ(sup.Check(*job, At(6000ms), kConnected), Supervisor::Next::kNothing);
  EXPECT_NE(job->state(), JobState::kFailed);
  // It is gone: the others' new generation ends the stall the reports described, and a report
  // its reporter writes once more about the old wait is not taken.
  Event(*job, 2, RankState::kExited, At(6500ms), 143);
  EXPECT_NE(job->state(), JobState::kFailed);
  EXPECT_EQ(job->status.elastic.workers, (std::vector<int>{0, 1}));
  EXPECT_TRUE(job->status.stall.empty());
  report.age_s = 7.0;
  sup.StallReport(*job, 1, FormatStallReport(report), At(7000ms));
  EXPECT_TRUE(job->status.stall.empty());
  EXPECT_EQ(sup.Check(*job, At(20s), kConnected), Supervisor::Next::kNothing);
  EXPECT_NE(job->state(), JobState::kFailed) << job->status.failure.message;
  // Worker 1 stalled on 0 in the new generation: removing it would leave one, below --min-np
  // 2, so the job fails as a fixed one does, showing worker 0's stderr.
  job->status.spec.min_np = 2;
  job->log.AddOutput(OutputLine{0, true, "worker 0 was here", -1});
  report.age_s = 1.0;
  report.blamed = {0};
  sup.StallReport(*job, 1, FormatStallReport(report), At(21s));
  EXPECT_EQ(sup.Check(*job, At(25s), kConnected), Supervisor::Next::kSettle);
  EXPECT_EQ(job->state(), JobState::kFailed);
  EXPECT_EQ(job->status.failure.rank, 0);
  EXPECT_EQ(job->status.failure.stderr_tail, "worker 0 was here");
}

}  // namespace
}  // namespace hvd::launcherd
