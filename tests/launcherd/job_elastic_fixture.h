// What the tests of Job's elastic rules share (job_elastic_test.cc, job_elastic_removal_test.cc):
// an elastic job of RUNNING workers on two agents, and its workers' ends as their agents report
// them.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "launcherd/job.h"
#include "test_clock.h"

namespace hvd::launcherd::testing {

inline const AgentConnected kAllConnected = [](const std::string&) { return true; };

// An elastic job of `np` workers RUNNING (0..np/2-1 on agent "a", host h-a; the others on "b",
// host h-b), generation 0 begun at kT0; its publications and log so far taken.
inline std::unique_ptr<Job> ElasticJob(int np, int min_np, int64_t timeout_ms = 600000,
                                       int reset_limit = 0) {
  auto job = JobWithRanks(np, RankState::kRunning);
  job->status.spec.min_np = min_np;
  job->status.spec.max_np = np;
  job->status.spec.elastic_timeout_ms = timeout_ms;
  job->status.spec.reset_limit = reset_limit;
  EXPECT_TRUE(job->elastic());
  job->ElasticBegin(kT0);
  EXPECT_TRUE(job->SetState(JobState::kRunning, "running"));
  return job;
}

// What the agent of `rank` reports when it ends.
inline RankEventReport Ended(int rank, RankState state, int exit_code = 0, int signal = 0,
                             std::string error = "") {
  RankEventReport ev;
  ev.job_id = "j1";
  ev.rank = rank;
  ev.state = state;
  ev.exit_code = exit_code;
  ev.signal = signal;
  ev.error = std::move(error);
  return ev;
}

inline void Report(Job& job, const RankEventReport& ev, Instant now) {
  const std::string agent = job.status.ranks.at(ev.rank).placement.agent_id;
  EXPECT_TRUE(job.OnRankEvent(ev, agent, kAllConnected, now));
}

}  // namespace hvd::launcherd::testing
