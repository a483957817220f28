// A clock for tests of launcherd's lock-free parts (Job, Supervisor): instants the test sets,
// so timers are checked just before and at their limits without sleeping.
#pragma once

#include <chrono>

#include "launcherd/job.h"

namespace hvd::launcherd::testing {

using namespace std::chrono_literals;

inline const Instant kT0{std::chrono::steady_clock::time_point(100s), 1'000'000};

// kT0 plus `d`, on both clocks.
inline Instant At(std::chrono::milliseconds d) {
  return {kT0.steady + d, kT0.wall_ms + d.count()};
}

}  // namespace hvd::launcherd::testing
