// The checked JobState/RankState conversions (control/job_state_proto.h): every wire value maps
// to its domain state and back, names agree, and numbers outside either enum become the explicit
// "unknown" instead of a value no switch handles.
#include "control/job_state_proto.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace hvd::control {
namespace {

TEST(JobStateProtoTest, EveryWireJobStateMapsAndRoundTrips) {
  std::set<JobState> seen;
  for (int n = v1::JobState_MIN; n <= v1::JobState_MAX; ++n) {
    ASSERT_TRUE(v1::JobState_IsValid(n)) << n;  // the wire numbers are dense
    const auto p = static_cast<v1::JobState>(n);
    const JobState s = JobStateFromProto(p);
    EXPECT_EQ(JobStateToProto(s), p) << v1::JobState_Name(p);
    // The proto's names are the domain's ("PENDING"), JOB_STATE_UNSPECIFIED aside.
    if (p != v1::JOB_STATE_UNSPECIFIED) {
      EXPECT_NE(s, JobState::kUnspecified) << v1::JobState_Name(p);
      EXPECT_EQ(std::string(JobStateName(s)), v1::JobState_Name(p));
    }
    seen.insert(s);
  }
  // No two wire values share a domain state.
  EXPECT_EQ(seen.size(), static_cast<size_t>(v1::JobState_MAX - v1::JobState_MIN + 1));
}

TEST(JobStateProtoTest, EveryWireRankStateMapsAndRoundTrips) {
  std::set<RankState> seen;
  for (int n = v1::RankState_MIN; n <= v1::RankState_MAX; ++n) {
    ASSERT_TRUE(v1::RankState_IsValid(n)) << n;
    const auto p = static_cast<v1::RankState>(n);
    const RankState s = RankStateFromProto(p);
    EXPECT_EQ(RankStateToProto(s), p) << v1::RankState_Name(p);
    if (p != v1::RANK_STATE_UNSPECIFIED) {
      EXPECT_NE(s, RankState::kUnspecified) << v1::RankState_Name(p);
      EXPECT_EQ("RANK_" + std::string(RankStateName(s)), v1::RankState_Name(p));
    }
    seen.insert(s);
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(v1::RankState_MAX - v1::RankState_MIN + 1));
}

TEST(JobStateProtoTest, UnknownWireNumbersBecomeUnspecified) {
  // proto3 enums are open: a newer peer's state arrives as a bare number.
  for (int n : {v1::JobState_MAX + 1, 42, -1}) {
    EXPECT_EQ(JobStateFromProto(static_cast<v1::JobState>(n)), JobState::kUnspecified) << n;
  }
  for (int n : {v1::RankState_MAX + 1, 42, -1}) {
    EXPECT_EQ(RankStateFromProto(static_cast<v1::RankState>(n)), RankState::kUnspecified) << n;
  }
}

TEST(JobStateProtoTest, OutOfRangeDomainValuesGoOutAsUnspecified) {
  EXPECT_EQ(JobStateToProto(static_cast<JobState>(99)), v1::JOB_STATE_UNSPECIFIED);
  EXPECT_EQ(RankStateToProto(static_cast<RankState>(99)), v1::RANK_STATE_UNSPECIFIED);
  EXPECT_EQ(JobStateToProto(static_cast<JobState>(-3)), v1::JOB_STATE_UNSPECIFIED);
}

}  // namespace
}  // namespace hvd::control
