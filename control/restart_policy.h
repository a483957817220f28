// Whether a failed attempt of a job runs again (--max-restarts), and after how long. Pure, so the
// rule is tested without processes:
//   - an attempt that failed for a reason a new attempt cannot change (the job can never be
//     placed; the launcher is shutting down) is final;
//   - otherwise up to max_restarts more attempts run, each with every rank, a new attempt number
//     and a fresh rendezvous scope;
//   - the first restart starts as soon as the failed attempt's ranks are gone; later ones wait
//     base_delay, doubling up to max_delay, so a job failing in a loop does not hammer its hosts.
#pragma once

#include <chrono>
#include <string>

namespace hvd::control {

struct RestartPolicy {
  int max_restarts = 0;
  std::chrono::milliseconds base_delay{1000};
  std::chrono::milliseconds max_delay{30000};
};

struct RestartDecision {
  bool restart = false;
  std::chrono::milliseconds delay{0};  // from the moment the failed attempt's ranks are gone
  // "restart 1 of 3" or why not: "no restarts left (--max-restarts 3)", "" when none were allowed.
  std::string text;
};

// `failed_attempt`: 0 for the first attempt. `permanent`: the failure cannot be fixed by a rerun.
RestartDecision DecideRestart(const RestartPolicy& policy, int failed_attempt, bool permanent);

}  // namespace hvd::control
