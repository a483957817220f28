#include "control/restart_policy.h"

#include <gtest/gtest.h>

namespace hvd::control {
namespace {

using std::chrono::milliseconds;

TEST(RestartPolicyTest, NoRestartsUnlessAsked) {
  RestartDecision d = DecideRestart(RestartPolicy{}, 0, false);
  EXPECT_FALSE(d.restart);
  EXPECT_EQ(d.text, "");
}

TEST(RestartPolicyTest, RestartsUpToTheLimitThenSaysSo) {
  RestartPolicy p;
  p.max_restarts = 2;
  RestartDecision first = DecideRestart(p, 0, false);
  EXPECT_TRUE(first.restart);
  EXPECT_EQ(first.text, "restart 1 of 2");
  EXPECT_EQ(first.delay, milliseconds(0));  // at once: the common case is one flaky failure
  RestartDecision second = DecideRestart(p, 1, false);
  EXPECT_TRUE(second.restart);
  EXPECT_EQ(second.text, "restart 2 of 2");
  RestartDecision third = DecideRestart(p, 2, false);
  EXPECT_FALSE(third.restart);
  EXPECT_EQ(third.text, "no restarts left (--max-restarts 2)");
}

TEST(RestartPolicyTest, LaterRestartsBackOffUpToTheCap) {
  RestartPolicy p;
  p.max_restarts = 100;
  p.base_delay = milliseconds(1000);
  p.max_delay = milliseconds(5000);
  EXPECT_EQ(DecideRestart(p, 1, false).delay, milliseconds(1000));
  EXPECT_EQ(DecideRestart(p, 2, false).delay, milliseconds(2000));
  EXPECT_EQ(DecideRestart(p, 3, false).delay, milliseconds(4000));
  EXPECT_EQ(DecideRestart(p, 4, false).delay, milliseconds(5000));
  EXPECT_EQ(DecideRestart(p, 60, false).delay, milliseconds(5000));  // no overflow
}

TEST(RestartPolicyTest, APermanentFailureIsFinal) {
  RestartPolicy p;
  p.max_restarts = 3;
  EXPECT_FALSE(DecideRestart(p, 0, true).restart);
}

}  // namespace
}  // namespace hvd::control
