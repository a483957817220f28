// LineSplitter, SanitizeUtf8 and LineTail: how worker bytes become the launcher's lines.
#include "agent/output_lines.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace hvd::agent {
namespace {

std::vector<std::string> Split(const std::vector<std::string>& chunks, size_t max = 100,
                               bool finish = true) {
  std::vector<std::string> lines;
  LineSplitter s(max, [&](std::string l) { lines.push_back(std::move(l)); });
  for (const std::string& c : chunks) s.Feed(c);
  if (finish) {
    s.Finish();
    s.Finish();  // idempotent
  }
  return lines;
}

TEST(LineSplitterTest, LinesSplitAcrossChunksAreJoined) {
  EXPECT_EQ(Split({"he", "llo\nwor", "ld\n", "\n", "x\ny"}),
            (std::vector<std::string>{"hello", "world", "", "x", "y"}));
}

TEST(LineSplitterTest, PartialLineWaitsForFinish) {
  EXPECT_EQ(Split({"a\nb"}, 100, false), std::vector<std::string>{"a"});
  EXPECT_EQ(Split({"a\nb"}), (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(Split({}).empty());
}

TEST(LineSplitterTest, CrLfEndsALine) {
  EXPECT_EQ(Split({"dos\r\n", "mid\rline\n"}), (std::vector<std::string>{"dos", "mid\rline"}));
}

TEST(LineSplitterTest, LongLinesAreTruncatedAndMarked) {
  std::vector<std::string> lines =
      Split({std::string(25, 'a'), std::string(5, 'b') + "\nok\n"}, 10);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], "aaaaaaaaaa... [hvd: line truncated, 20 bytes dropped]");
  EXPECT_EQ(lines[1], "ok");
  // Exactly at the cap: not truncated.
  EXPECT_EQ(Split({std::string(10, 'c') + "\n"}, 10),
            std::vector<std::string>{std::string(10, 'c')});
}

TEST(SanitizeUtf8Test, KeepsValidTextAndReplacesInvalidBytes) {
  EXPECT_EQ(SanitizeUtf8("plain ascii"), "plain ascii");
  EXPECT_EQ(SanitizeUtf8("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80"),
            "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80");
  const std::string fffd = "\xEF\xBF\xBD";
  EXPECT_EQ(SanitizeUtf8("a\xFF"
                         "b"),
            "a" + fffd + "b");
  EXPECT_EQ(SanitizeUtf8("\xC3"), fffd);                                   // truncated sequence
  EXPECT_EQ(SanitizeUtf8("\xC0\xAF"), fffd + fffd);                        // overlong
  EXPECT_EQ(SanitizeUtf8("\xED\xA0\x80"), fffd + fffd + fffd);             // surrogate
  EXPECT_EQ(SanitizeUtf8("\xF4\x90\x80\x80"), fffd + fffd + fffd + fffd);  // > U+10FFFF
  EXPECT_EQ(SanitizeUtf8(std::string("nul\0ok", 6)), std::string("nul\0ok", 6));
}

TEST(LineTailTest, KeepsTheLastLinesAndBytes) {
  LineTail tail(3, 1000);
  EXPECT_EQ(tail.Text(), "");
  for (int i = 1; i <= 5; ++i) tail.Add("line" + std::to_string(i));
  EXPECT_EQ(tail.Text(), "line3\nline4\nline5");
  LineTail small(3, 8);
  small.Add("abcdef");
  small.Add("ghijkl");
  EXPECT_EQ(small.Text(), "f\nghijkl");
}

}  // namespace
}  // namespace hvd::agent
