#include "control/job_state.h"

#include <gtest/gtest.h>

#include <csignal>
#include <set>

namespace hvd::control {
namespace {

constexpr JobState kAll[] = {JobState::kUnspecified, JobState::kPending,   JobState::kStarting,
                             JobState::kRunning,     JobState::kSucceeded, JobState::kFailed,
                             JobState::kCancelled,   JobState::kRestarting};

TEST(JobStateTest, ExactlyTheDesignedTransitions) {
  using S = JobState;
  const std::set<std::pair<S, S>> allowed = {
      {S::kPending, S::kStarting},   {S::kPending, S::kFailed},
      {S::kPending, S::kCancelled},  {S::kStarting, S::kRunning},
      {S::kStarting, S::kFailed},    {S::kStarting, S::kCancelled},
      {S::kRunning, S::kSucceeded},  {S::kRunning, S::kFailed},
      {S::kRunning, S::kCancelled},  {S::kStarting, S::kRestarting},
      {S::kRunning, S::kRestarting}, {S::kRestarting, S::kPending},
      {S::kRestarting, S::kFailed},  {S::kRestarting, S::kCancelled},
  };
  for (S from : kAll) {
    for (S to : kAll) {
      const bool want = allowed.count({from, to}) > 0;
      EXPECT_EQ(CanTransition(from, to), want) << JobStateName(from) << " -> " << JobStateName(to);
      EXPECT_EQ(CheckTransition(from, to).ok(), want);
    }
  }
}

TEST(JobStateTest, TerminalStatesAreFinalAndSaySo) {
  for (JobState s : {JobState::kSucceeded, JobState::kFailed, JobState::kCancelled}) {
    EXPECT_TRUE(IsTerminal(s));
  }
  for (JobState s : {JobState::kPending, JobState::kStarting, JobState::kRunning}) {
    EXPECT_FALSE(IsTerminal(s));
  }
  Status st = CheckTransition(JobState::kSucceeded, JobState::kFailed);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(st.message(), "job state SUCCEEDED cannot become FAILED (it already ended)");
}

TEST(JobStateTest, RankEnded) {
  EXPECT_TRUE(RankEnded(RankState::kExited));
  EXPECT_TRUE(RankEnded(RankState::kFailedToStart));
  EXPECT_TRUE(RankEnded(RankState::kKilled));
  EXPECT_FALSE(RankEnded(RankState::kPending));
  EXPECT_FALSE(RankEnded(RankState::kStarting));
  EXPECT_FALSE(RankEnded(RankState::kRunning));
}

TEST(JobStateTest, ExitCodeRule) {
  EXPECT_EQ(ExitCodeFor(0, 0), 0);
  EXPECT_EQ(ExitCodeFor(3, 0), 3);
  EXPECT_EQ(ExitCodeFor(0, SIGKILL), 137);
  EXPECT_EQ(ExitCodeFor(0, SIGSEGV), 139);
  EXPECT_EQ(kCancelledExitCode, 130);
}

TEST(JobStateTest, Descriptions) {
  EXPECT_EQ(SignalName(SIGSEGV), "SIGSEGV");
  EXPECT_EQ(SignalName(SIGTERM), "SIGTERM");
  EXPECT_EQ(SignalName(99), "signal 99");
  EXPECT_EQ(DescribeRankExit(2, "host-b", 3, 0), "rank 2 on host-b exited with code 3");
  EXPECT_EQ(DescribeRankExit(0, "a", 0, SIGSEGV), "rank 0 on a was killed by SIGSEGV (signal 11)");
  EXPECT_STREQ(JobStateName(JobState::kCancelled), "CANCELLED");
  EXPECT_STREQ(RankStateName(RankState::kFailedToStart), "FAILED_TO_START");
}

}  // namespace
}  // namespace hvd::control
