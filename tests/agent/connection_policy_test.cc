// The reconnect and lease rules, with time passed in.
#include "agent/connection_policy.h"

#include <gtest/gtest.h>

namespace hvd::agent {
namespace {

using Ms = std::chrono::milliseconds;

TEST(ConnectionPolicyTest, BackoffDoublesUpToTheMaximumAndResetsOnRegistration) {
  const auto t0 = ConnectionPolicy::Clock::now();
  ConnectionPolicy p({Ms(100), Ms(1000), Ms(5000)}, t0);
  EXPECT_EQ(p.NextBackoff(), Ms(100));
  EXPECT_EQ(p.NextBackoff(), Ms(200));
  EXPECT_EQ(p.NextBackoff(), Ms(400));
  EXPECT_EQ(p.NextBackoff(), Ms(800));
  EXPECT_EQ(p.NextBackoff(), Ms(1000));
  EXPECT_EQ(p.NextBackoff(), Ms(1000));
  p.Connected(Ms(0));
  EXPECT_EQ(p.NextBackoff(), Ms(100));
}

TEST(ConnectionPolicyTest, BackoffTriesAtLeastFourTimesPerLease) {
  const auto t0 = ConnectionPolicy::Clock::now();
  ConnectionPolicy p({Ms(100), Ms(2000), Ms(5000)}, t0);
  p.Connected(Ms(2000));
  p.Disconnected(t0);
  EXPECT_EQ(p.NextBackoff(), Ms(100));
  EXPECT_EQ(p.NextBackoff(), Ms(200));
  EXPECT_EQ(p.NextBackoff(), Ms(400));
  EXPECT_EQ(p.NextBackoff(), Ms(500));  // a quarter of the 2 s lease
  EXPECT_EQ(p.NextBackoff(), Ms(500));
}

TEST(ConnectionPolicyTest, DefaultLeaseCountsFromStartUntilTheFirstRegistration) {
  const auto t0 = ConnectionPolicy::Clock::now();
  ConnectionPolicy p({Ms(100), Ms(1000), Ms(5000)}, t0);
  EXPECT_FALSE(p.connected());
  p.Disconnected(t0 + Ms(3000));  // a failed attempt does not restart the outage
  EXPECT_EQ(p.UnreachableFor(t0 + Ms(4999)), Ms(4999));
  EXPECT_FALSE(p.LeaseExpired(t0 + Ms(4999)));
  EXPECT_TRUE(p.LeaseExpired(t0 + Ms(5000)));
}

TEST(ConnectionPolicyTest, LeaseFromTheAckCountsFromTheBreak) {
  const auto t0 = ConnectionPolicy::Clock::now();
  ConnectionPolicy p({Ms(100), Ms(1000), Ms(5000)}, t0);
  p.Connected(Ms(2000));
  EXPECT_EQ(p.lease(), Ms(2000));
  EXPECT_FALSE(p.LeaseExpired(t0 + Ms(60000)));  // connected: never
  EXPECT_EQ(p.UnreachableFor(t0 + Ms(60000)), Ms(0));
  p.Disconnected(t0 + Ms(10000));
  p.Disconnected(t0 + Ms(11000));  // further failed attempts: same outage
  EXPECT_FALSE(p.LeaseExpired(t0 + Ms(11999)));
  EXPECT_TRUE(p.LeaseExpired(t0 + Ms(12000)));
  EXPECT_EQ(p.UnreachableFor(t0 + Ms(12500)), Ms(2500));
  // The launcher is back before anything else happens: the outage is over.
  p.Connected(Ms(0));  // no lease in the ack: the previous one stays
  EXPECT_EQ(p.lease(), Ms(2000));
  EXPECT_FALSE(p.LeaseExpired(t0 + Ms(20000)));
}

}  // namespace
}  // namespace hvd::agent
