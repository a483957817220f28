#include "agent/stdin_session.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include "testutil/expect.h"

namespace hvd::agent {
namespace {

using std::chrono::milliseconds;

// A pipe holding `text`, its write end closed when `close_write`.
struct Pipe {
  Pipe(const std::string& text, bool close_write) {
    EXPECT_EQ(pipe(fds), 0);
    EXPECT_EQ(write(fds[1], text.data(), text.size()), static_cast<ssize_t>(text.size()));
    if (close_write) {
      close(fds[1]);
      fds[1] = -1;
    }
  }
  ~Pipe() {
    close(fds[0]);
    if (fds[1] >= 0) close(fds[1]);
  }
  int fds[2];
};

TEST(ReadTokenLine, FirstLineTrimmedAndNothingMore) {
  Pipe p("  abc123 \nrest", false);
  std::string token;
  ASSERT_TRUE(ReadTokenLine(p.fds[0], milliseconds(1000), &token).ok());
  EXPECT_EQ(token, "abc123");
  char rest[4];
  ASSERT_EQ(read(p.fds[0], rest, 4), 4);  // what follows the line is left unread
  EXPECT_EQ(std::string(rest, 4), "rest");
}

TEST(ReadTokenLine, EndOfInputEndsTheLine) {
  Pipe p("tok", true);
  std::string token;
  ASSERT_TRUE(ReadTokenLine(p.fds[0], milliseconds(1000), &token).ok());
  EXPECT_EQ(token, "tok");
}

TEST(ReadTokenLine, EmptyOrSilentStdinIsAnError) {
  std::string token;
  Pipe empty("\n", false);
  Status s = ReadTokenLine(empty.fds[0], milliseconds(1000), &token);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_HAS(s.message(), "stdin held no token");
  Pipe silent("", false);
  s = ReadTokenLine(silent.fds[0], milliseconds(100), &token);
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded);
  EXPECT_HAS(s.message(), "no token line on stdin");
}

}  // namespace
}  // namespace hvd::agent
