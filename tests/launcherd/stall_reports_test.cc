#include "launcherd/stall_reports.h"

#include <gtest/gtest.h>

namespace hvd::launcherd {
namespace {

std::string Host(int rank) {
  return "host-" + std::string(1, static_cast<char>('a' + rank));
}

StallReport Wait(double age, std::vector<int> blamed, std::string message) {
  return {StallReport::Kind::kWait, age, std::move(blamed), std::move(message)};
}

TEST(StallReports, ValuesRoundTripAndMalformedOnesAreRefused) {
  StallReport r{StallReport::Kind::kInspector, 61.7, {3, 5}, "rank 3 has not submitted 'x'\nmore"};
  StallReport back;
  ASSERT_TRUE(ParseStallReport(FormatStallReport(r), &back));
  EXPECT_EQ(back.kind, StallReport::Kind::kInspector);
  EXPECT_EQ(back.age_s, 61);
  EXPECT_EQ(back.blamed, (std::vector<int>{3, 5}));
  EXPECT_EQ(back.message, r.message);
  ASSERT_TRUE(ParseStallReport("W\n5\n\nwaiting", &back));  // nobody blamed
  EXPECT_TRUE(back.blamed.empty());
  for (const char* bad :
       {"", "X\n1\n2\nm", "W\nabc\n1\nm", "W\n-1\n1\nm", "W\n1\n1,x\nm", "W\n1\n1\n", "W\n1"}) {
    EXPECT_FALSE(ParseStallReport(bad, &back)) << bad;
  }
}

TEST(StallReports, NothingToSay) {
  EXPECT_EQ(SummarizeStalls({}, Host), "");
}

// Rank 3 is SIGSTOPped: it reports nothing; ranks 0 and 2 wait on it, rank 1 waits on rank 0.
TEST(StallReports, TheEndOfTheWaitChainIsTheCulprit) {
  std::map<int, StallReport> reports = {
      {0, Wait(12, {3}, "rank 0 waits for rank 3")},
      {1, Wait(11, {0}, "rank 1 waits for rank 0")},
      {2, Wait(9, {3}, "rank 2 waits for rank 3")},
  };
  EXPECT_EQ(SummarizeStalls(reports, Host),
            "rank 3 on host-d has not responded for 12 s: ranks 0, 2 wait for it (stopped, or "
            "stuck outside hvd?)");
  EXPECT_EQ(OldestStall(reports), 12);
}

TEST(StallReports, TheCoordinatorsWordsWinForRanksStuckInUserCode) {
  std::map<int, StallReport> reports = {
      {0,
       {StallReport::Kind::kInspector,
        60,
        {2},
        "rank 2 on host-c has not submitted "
        "allreduce 'fc1.grad' for 60 s (ranks 0, 1 "
        "have)"}},
  };
  EXPECT_EQ(SummarizeStalls(reports, Host),
            "rank 2 on host-c has not submitted allreduce 'fc1.grad' for 60 s (ranks 0, 1 have)");
}

TEST(StallReports, WithoutAChainTheOldestReportIsShown) {
  std::map<int, StallReport> reports = {
      {0, Wait(5, {1}, "rank 0 waits for rank 1")},
      {1, Wait(7, {0}, "rank 1 waits for rank 0")},
      {2, Wait(1, {}, "rank 2 waits")},
  };
  EXPECT_EQ(SummarizeStalls(reports, Host), "rank 1 waits for rank 0 (and 2 more stall reports)");
}

}  // namespace
}  // namespace hvd::launcherd
