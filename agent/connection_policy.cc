#include "agent/connection_policy.h"

#include <algorithm>

namespace hvd::agent {

ConnectionPolicy::ConnectionPolicy(Config config, Clock::time_point now)
    : config_(config),
      lease_(config.default_lease),
      backoff_(config.initial_backoff),
      unreachable_since_(now) {}

void ConnectionPolicy::Connected(Ms lease) {
  connected_ = true;
  if (lease.count() > 0) lease_ = lease;
  backoff_ = config_.initial_backoff;
}

void ConnectionPolicy::Disconnected(Clock::time_point now) {
  if (connected_) unreachable_since_ = now;
  connected_ = false;
}

ConnectionPolicy::Ms ConnectionPolicy::NextBackoff() {
  const Ms wait = backoff_;
  // At least four tries per lease: a launcher back within the lease must find its agents back
  // in time too (they end their jobs at the lease, and it declares them lost at the lease).
  const Ms cap = std::max(config_.initial_backoff, std::min(config_.max_backoff, lease_ / 4));
  backoff_ = std::min(backoff_ * 2, cap);
  return std::min(wait, cap);
}

ConnectionPolicy::Ms ConnectionPolicy::UnreachableFor(Clock::time_point now) const {
  if (connected_) return Ms(0);
  return std::max(Ms(0), std::chrono::duration_cast<Ms>(now - unreachable_since_));
}

bool ConnectionPolicy::LeaseExpired(Clock::time_point now) const {
  return !connected_ && UnreachableFor(now) >= lease_;
}

}  // namespace hvd::agent
