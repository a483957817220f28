// LogEscape and RateLimitedLog: what a client sends cannot forge or split a log line, and a peer
// that fails on purpose gets one line per interval with a count of the rest.
#include "control/log_escape.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

namespace hvd::control {
namespace {

using namespace std::chrono_literals;

TEST(LogEscapeTest, PrintableTextIsKept) {
  EXPECT_EQ(LogEscape("node-a.example:7070 job_1"), "node-a.example:7070 job_1");
  EXPECT_EQ(LogEscape(""), "");
}

TEST(LogEscapeTest, ControlCharactersAndNewlinesAreEscaped) {
  // A forged second line and a terminal escape (clear screen) in a host name.
  const std::string host = "evil\nhvd-launcherd: agent node-b registered\r\x1b[2J\t\\";
  const std::string out = LogEscape(host);
  EXPECT_EQ(out, "evil\\nhvd-launcherd: agent node-b registered\\r\\x1b[2J\\t\\\\");
  for (char c : out) {
    EXPECT_TRUE(c >= 0x20 && c < 0x7f) << "byte " << static_cast<int>(c) << " in " << out;
  }
  EXPECT_EQ(LogEscape(std::string("a\0b", 3)), "a\\x00b");
  EXPECT_EQ(LogEscape("\x7f\xc3\xa9"), "\\x7f\\xc3\\xa9");  // DEL and UTF-8 as bytes
}

TEST(LogEscapeTest, LongTextIsCutWithTheCount) {
  const std::string out = LogEscape(std::string(1000, 'k'), 10);
  EXPECT_EQ(out, "kkkkkkkkkk...(990 more bytes)");
  EXPECT_EQ(LogEscape(std::string(10, 'k'), 10), std::string(10, 'k'));
}

TEST(RateLimitedLogTest, OneLinePerPeerPerIntervalWithTheCountOfTheRest) {
  RateLimitedLog log(10s);
  const auto t0 = RateLimitedLog::Clock::now();
  uint64_t suppressed = 99;
  ASSERT_TRUE(log.Allow("10.0.0.1:5000", &suppressed, t0));
  EXPECT_EQ(suppressed, 0u);
  for (int i = 1; i <= 5; ++i) {
    EXPECT_FALSE(log.Allow("10.0.0.1:5000", &suppressed, t0 + i * 1s));
  }
  // Another peer is not held back by the first one.
  ASSERT_TRUE(log.Allow("10.0.0.2:6000", &suppressed, t0 + 5s));
  EXPECT_EQ(suppressed, 0u);
  ASSERT_TRUE(log.Allow("10.0.0.1:5000", &suppressed, t0 + 10s));
  EXPECT_EQ(suppressed, 5u);
  EXPECT_FALSE(log.Allow("10.0.0.1:5000", &suppressed, t0 + 11s));
}

TEST(RateLimitedLogTest, ManyPeersDoNotGrowTheTable) {
  RateLimitedLog log(10s, /*max_keys=*/8);
  const auto t0 = RateLimitedLog::Clock::now();
  uint64_t suppressed = 0;
  for (int i = 0; i < 100; ++i) {
    EXPECT_TRUE(log.Allow("peer" + std::to_string(i), &suppressed, t0)) << i;
  }
}

// Warn writes through HVD_LOG to stderr: one line for a burst, then the count with the next one.
TEST(RateLimitedLogTest, WarnWritesOneLineAndTheCount) {
  RateLimitedLog log(200ms);
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < 50; ++i) log.Warn("127.0.0.1:1", "refused " + LogEscape("x\ny"));
  std::this_thread::sleep_for(250ms);
  log.Warn("127.0.0.1:1", "refused again");
  const std::string err = ::testing::internal::GetCapturedStderr();
  size_t lines = 0;
  for (char c : err) lines += c == '\n';
  EXPECT_EQ(lines, 2u) << err;
  EXPECT_NE(err.find("refused x\\ny"), std::string::npos) << err;
  EXPECT_NE(err.find("refused again (and 49 more from 127.0.0.1:1"), std::string::npos) << err;
}

TEST(PeerHostTest, DropsThePortOfEveryAddressForm) {
  EXPECT_EQ(PeerHost("ipv4:10.0.0.5:41234"), "ipv4:10.0.0.5");
  EXPECT_EQ(PeerHost("ipv6:[::1]:5000"), "ipv6:[::1]");
  EXPECT_EQ(PeerHost("10.0.0.5:41234"), "10.0.0.5");
  EXPECT_EQ(PeerHost("unix:"), "unix");
  EXPECT_EQ(PeerHost("no-colon"), "no-colon");
}

}  // namespace
}  // namespace hvd::control
