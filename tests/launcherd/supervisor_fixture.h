// The Supervisor tests' jobs and clock (job_supervisor_test.cc, job_stall_timeout_test.cc): jobs
// built by hand in the states the timers judge, events as agents report them.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "launcherd/job_supervision.h"
#include "test_clock.h"

namespace hvd::launcherd::testing {

using namespace std::chrono_literals;

inline const AgentConnected kConnected = [](const std::string&) { return true; };

inline std::unique_ptr<Job> NewJob(int np, JobRules rules = {}) {
  auto job = std::make_unique<Job>(rules, 100, 1 << 20);
  job->status.id = "j1";
  job->status.spec.argv = {"./train"};
  job->status.spec.np = np;
  job->status.spec.detached = true;
  job->status.queued_since_ms = kT0.wall_ms;
  job->unwatched_since = kT0.steady;
  return job;
}

// STARTING since kT0 with every rank sent to agent "a" on host h.
inline std::unique_ptr<Job> StartedJob(int np) {
  auto job = NewJob(np);
  for (int r = 0; r < np; ++r) {
    RankStatus rs;
    rs.placement.rank = r;
    rs.placement.agent_id = "a";
    rs.placement.host = "h";
    rs.state = RankState::kStarting;
    job->status.ranks.push_back(rs);
  }
  job->attempt_started = kT0.steady;
  EXPECT_TRUE(job->SetState(JobState::kStarting, "starting"));
  return job;
}

inline SupervisorOptions Options() {
  SupervisorOptions o;
  o.start_timeout = 30s;
  o.client_lease = 5s;
  o.master_port_timeout = 1s;
  return o;
}

// What an agent reports of `rank` (RUNNING, or an exit code).
inline void Event(Job& job, int rank, RankState state, Instant now, int exit_code = 0) {
  RankEventReport ev;
  ev.job_id = job.status.id;
  ev.rank = rank;
  ev.state = state;
  ev.pid = 40 + rank;
  ev.exit_code = exit_code;
  job.OnRankEvent(ev, job.status.ranks[rank].placement.agent_id, kConnected, now);
}

}  // namespace hvd::launcherd::testing
