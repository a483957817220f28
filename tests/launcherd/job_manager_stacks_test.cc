// JobManager::DumpStacks (Launcher.DumpStacks: `hvdrun stacks`, an attached hvdrun's SIGQUIT):
// a running job's ranks are asked on their own agents, each time; an unknown job, an ended one
// and a rank the job does not have are refused, saying so.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "control/job_model.h"
#include "job_manager_fixture.h"
#include "testutil/expect.h"

namespace hvd::launcherd {
namespace {

class JobManagerStacksTest : public JobManagerFixture {};

TEST_F(JobManagerStacksTest, EveryRunningRankIsAskedOnItsAgentEachTime) {
  auto a = AddAgent("ha", 1);
  auto b = AddAgent("hb", 1);
  const std::string id = Submit(2);
  Event(a, id, 0, RankState::kRunning);
  Event(b, id, 1, RankState::kRunning);
  std::vector<int> asked;
  ASSERT_TRUE(jobs_->DumpStacks(id, {}, "hvdrun stacks", &asked).ok());
  EXPECT_EQ(asked, (std::vector<int>{0, 1}));
  ASSERT_EQ(a->dumps.size(), 1u);
  ASSERT_EQ(b->dumps.size(), 1u);
  EXPECT_EQ(a->dumps[0].job_id, id);
  EXPECT_EQ(a->dumps[0].signal, control::kStackDumpSignal);
  EXPECT_EQ(a->dumps[0].reason, "hvdrun stacks");
  // Which rank is where depends on placement; together they are the job's two.
  std::vector<int> both = a->dumps[0].ranks;
  both.insert(both.end(), b->dumps[0].ranks.begin(), b->dumps[0].ranks.end());
  std::sort(both.begin(), both.end());
  EXPECT_EQ(both, (std::vector<int>{0, 1}));

  // One rank, again: a request is not a stall's once.
  ASSERT_TRUE(jobs_->DumpStacks(id, {1}, "again", &asked).ok());
  EXPECT_EQ(asked, std::vector<int>{1});
  EXPECT_EQ(a->dumps.size() + b->dumps.size(), 3u);
}

TEST_F(JobManagerStacksTest, WrongRequestsAreRefusedSayingWhy) {
  std::vector<int> asked;
  EXPECT_EQ(jobs_->DumpStacks("nope", {}, "", &asked).code(), StatusCode::kNotFound);
  auto a = AddAgent("h", 1);
  const std::string id = Submit(1);
  Event(a, id, 0, RankState::kRunning);
  Status bad = jobs_->DumpStacks(id, {3}, "", &asked);
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_HAS(bad.message(), "rank 3: job " + id + " has ranks 0 to 0");
  EXPECT_TRUE(a->dumps.empty());
  JobState state;
  ASSERT_TRUE(jobs_->Cancel(id, "", &state).ok());
  Status ended = jobs_->DumpStacks(id, {}, "", &asked);
  EXPECT_EQ(ended.code(), StatusCode::kFailedPrecondition);
  EXPECT_HAS(ended.message(), "has ended (CANCELLED)");
}

}  // namespace
}  // namespace hvd::launcherd
