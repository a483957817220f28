// control/text.h: the line splitting and trimming that hostfiles and horovodrun's config file
// share.
#include "control/text.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace hvd::control {
namespace {

using Lines = std::vector<std::string_view>;

TEST(Text, Trim) {
  EXPECT_EQ(Trim("  a b \t\r\n"), "a b");
  EXPECT_EQ(Trim(""), "");
  EXPECT_EQ(Trim(" \t "), "");
  EXPECT_EQ(TrimRight("  a  "), "  a");
}

TEST(Text, SplitLines) {
  EXPECT_EQ(SplitLines(""), Lines{});
  EXPECT_EQ(SplitLines("a"), Lines{"a"});
  EXPECT_EQ(SplitLines("a\n"), Lines{"a"});
  EXPECT_EQ(SplitLines("a\n\nb"), (Lines{"a", "", "b"}));
  EXPECT_EQ(SplitLines("a\r\nb\r\n"), (Lines{"a", "b"}));
  EXPECT_EQ(SplitLines("\n"), Lines{""});
  EXPECT_EQ(SplitLines("a\rb\n"), Lines{"a\rb"});  // only a '\r' before '\n' ends a line
}

TEST(Text, StripUtf8Bom) {
  EXPECT_EQ(StripUtf8Bom("\xEF\xBB\xBFparams:"), "params:");
  EXPECT_EQ(StripUtf8Bom("params:"), "params:");
  EXPECT_EQ(StripUtf8Bom("\xEF\xBB"), "\xEF\xBB");
  EXPECT_EQ(StripUtf8Bom("a\xEF\xBB\xBF"), "a\xEF\xBB\xBF");
}

}  // namespace
}  // namespace hvd::control
