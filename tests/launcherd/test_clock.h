// For tests of launcherd's lock-free parts (Job, Supervisor): instants the test sets, so timers
// are checked just before and at their limits without sleeping, and a job with placed ranks.
#pragma once

#include <chrono>
#include <memory>

#include "launcherd/job.h"

namespace hvd::launcherd::testing {

using namespace std::chrono_literals;

inline const Instant kT0{std::chrono::steady_clock::time_point(100s), 1'000'000};

// kT0 plus `d`, on both clocks.
inline Instant At(std::chrono::milliseconds d) {
  return {kT0.steady + d, kT0.wall_ms + d.count()};
}

// A job of `np` ranks in STARTING, ranks 0..np/2-1 on agent "a" (host h-a), the others on "b"
// (host h-b), every rank in `state`.
inline std::unique_ptr<Job> JobWithRanks(int np, RankState state, JobRules rules = {},
                                         int max_restarts = 0) {
  auto job = std::make_unique<Job>(rules, 100, 1 << 20);
  job->status.id = "j1";
  job->status.spec.argv = {"./train"};
  job->status.spec.np = np;
  job->status.spec.max_restarts = max_restarts;
  for (int r = 0; r < np; ++r) {
    RankStatus rs;
    rs.placement.rank = r;
    rs.placement.agent_id = r < np / 2 ? "a" : "b";
    rs.placement.host = r < np / 2 ? "h-a" : "h-b";
    rs.state = state;
    job->status.ranks.push_back(rs);
  }
  job->SetState(JobState::kStarting, "starting");
  return job;
}

}  // namespace hvd::launcherd::testing
