// control/suggest.h: the "did you mean" of hvdrun's unknown flags and subcommands.
#include "control/suggest.h"

#include <gtest/gtest.h>

namespace hvd::control {
namespace {

TEST(Suggest, EditDistance) {
  EXPECT_EQ(EditDistance("", ""), 0);
  EXPECT_EQ(EditDistance("stats", "status"), 1);
  EXPECT_EQ(EditDistance("kitten", "sitting"), 3);
  EXPECT_EQ(EditDistance("", "abc"), 3);
  EXPECT_EQ(EditDistance("logs", "jobs"), 2);
}

TEST(Suggest, NearestWordWithinTheLimit) {
  const std::vector<std::string> commands = {"submit", "status", "list", "cancel", "logs"};
  EXPECT_EQ(NearestWord("stats", commands, 2), "status");
  EXPECT_EQ(NearestWord("lst", commands, 2), "list");
  EXPECT_EQ(NearestWord("frobnicate", commands, 2), "");
}

TEST(Suggest, NearestFlag) {
  const std::vector<std::string> known = {"--num-proc",
                                          "-np",
                                          "--hosts",
                                          "-H",
                                          "--fusion-threshold-mb",
                                          "--timeline-filename",
                                          "--timeline-mark-cycles",
                                          "--verbose",
                                          "-v"};
  EXPECT_EQ(NearestFlag("--np", known), "-np");  // other dashes
  EXPECT_EQ(NearestFlag("-n", known), "-np");    // the shortest it begins
  EXPECT_EQ(NearestFlag("--fusion-threshold", known), "--fusion-threshold-mb");
  EXPECT_EQ(NearestFlag("--timeline", known), "--timeline-filename");
  EXPECT_EQ(NearestFlag("--verbos", known), "--verbose");   // prefix
  EXPECT_EQ(NearestFlag("--vrebose", known), "--verbose");  // 2 edits
  EXPECT_EQ(NearestFlag("-x", known), "");                  // one letter: no guess
  EXPECT_EQ(NearestFlag("--completely-else", known), "");
}

}  // namespace
}  // namespace hvd::control
