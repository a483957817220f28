#include "control/restart_policy.h"

#include <algorithm>

namespace hvd::control {

RestartDecision DecideRestart(const RestartPolicy& policy, int failed_attempt, bool permanent) {
  RestartDecision d;
  if (policy.max_restarts <= 0 || permanent) return d;
  if (failed_attempt >= policy.max_restarts) {
    d.text = "no restarts left (--max-restarts " + std::to_string(policy.max_restarts) + ")";
    return d;
  }
  d.restart = true;
  d.text = "restart " + std::to_string(failed_attempt + 1) + " of " +
           std::to_string(policy.max_restarts);
  if (failed_attempt > 0) {
    auto delay = policy.base_delay;
    for (int i = 1; i < failed_attempt && delay < policy.max_delay; ++i) delay *= 2;
    d.delay = std::min(delay, policy.max_delay);
  }
  return d;
}

}  // namespace hvd::control
