// base/clock.h: durations as messages show them, and the wall clock in milliseconds.
#include "base/clock.h"

#include <gtest/gtest.h>

namespace hvd::base {
namespace {

TEST(ClockTest, SecondsTextHasOneDecimal) {
  EXPECT_EQ(SecondsText(std::chrono::milliseconds(3250)), "3.2 s");
  EXPECT_EQ(SecondsText(std::chrono::milliseconds(100)), "0.1 s");
  EXPECT_EQ(SecondsText(std::chrono::seconds(30)), "30.0 s");
  const int64_t now = WallMs();
  EXPECT_GT(now, int64_t{1600000000000});  // after 2020: milliseconds since the epoch
}

}  // namespace
}  // namespace hvd::base
