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

TEST(Text, Utf8PrefixNeverEndsInsideACharacter) {
  EXPECT_EQ(Utf8Prefix("abc", 5), "abc");
  EXPECT_EQ(Utf8Prefix("abc", 2), "ab");
  EXPECT_EQ(Utf8Prefix("", 0), "");
  const std::string e =
      "a\xC3\xA9"
      "b";  // "aéb": é is 2 bytes
  EXPECT_EQ(Utf8Prefix(e, 1), "a");
  EXPECT_EQ(Utf8Prefix(e, 2), "a");  // not "a\xC3"
  EXPECT_EQ(Utf8Prefix(e, 3), "a\xC3\xA9");
  const std::string euro = "\xE2\x82\xAC\xE2\x82\xAC";  // two 3-byte characters
  for (size_t n = 3; n < 6; ++n) EXPECT_EQ(Utf8Prefix(euro, n), "\xE2\x82\xAC") << n;
  EXPECT_EQ(Utf8Prefix(euro, 2), "");
  const std::string emoji = "\xF0\x9F\x98\x80!";  // a 4-byte character
  EXPECT_EQ(Utf8Prefix(emoji, 3), "");
  EXPECT_EQ(Utf8Prefix(emoji, 4), "\xF0\x9F\x98\x80");
}

}  // namespace
}  // namespace hvd::control
