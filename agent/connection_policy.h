// When the agent retries the launcher and when it gives up the launcher's jobs. Pure (time is
// passed in), so the rules are tested without a network:
//   - reconnect with exponential backoff (reset by every successful registration), capped at a
//     quarter of the lease so a launcher that is back within the lease is found in time;
//   - the launcher is "unreachable" from the moment a stream breaks or an attempt fails until a
//     registration succeeds;
//   - once unreachable for longer than the lease (from RegisterAck; a default before the first
//     ack), every job on this host ends: the launcher has declared this agent lost and failed or
//     rescheduled its ranks by then, so they must not keep running unsupervised.
#pragma once

#include <chrono>

namespace hvd::agent {

class ConnectionPolicy {
 public:
  using Clock = std::chrono::steady_clock;
  using Ms = std::chrono::milliseconds;

  struct Config {
    Ms initial_backoff{100};
    Ms max_backoff{2000};
    Ms default_lease{5000};  // before the first RegisterAck
  };

  // Unreachable since `now` until the first registration.
  ConnectionPolicy(Config config, Clock::time_point now);

  // A registration succeeded; `lease` from its ack (<= 0 keeps the current one).
  void Connected(Ms lease);
  // The stream broke or an attempt failed. The outage starts at the first such call.
  void Disconnected(Clock::time_point now);
  // How long to wait before the next attempt; each call doubles the next, up to max_backoff.
  Ms NextBackoff();

  bool connected() const { return connected_; }
  Ms lease() const { return lease_; }
  // Zero while connected.
  Ms UnreachableFor(Clock::time_point now) const;
  // Unreachable for longer than the lease: end every job.
  bool LeaseExpired(Clock::time_point now) const;

 private:
  Config config_;
  Ms lease_;
  Ms backoff_;
  bool connected_ = false;
  Clock::time_point unreachable_since_;
};

}  // namespace hvd::agent
