// What hvdrun says of a job's stall reports (cli/stall_news.h): once per stall, whatever its age;
// its end only after progress, not when a new elastic generation cleared the reports.
#include "cli/stall_news.h"

#include <gtest/gtest.h>

namespace hvd::cli {
namespace {

control::JobStatus With(const std::string& stall, int64_t generation = 0) {
  control::JobStatus s;
  s.stall = stall;
  s.elastic.generation = generation;
  return s;
}

TEST(StallNews, AStallIsSaidOnceWhateverItsAge) {
  const std::string a = "rank 1 on vm has not submitted allreduce 'g.0' for 2 s (rank 0 has)";
  const std::string b = "rank 1 on vm has not submitted allreduce 'g.0' for 12.5 s (rank 0 has)";
  EXPECT_EQ(StallShape(a), StallShape(b));
  EXPECT_EQ(StallNews("j", With(""), With(a)), "hvdrun: job j stalled: " + a);
  EXPECT_EQ(StallNews("j", With(a), With(b)), "");
  // Another rank or tensor is another stall; digits in names are not ages.
  const std::string c = "rank 2 on vm has not submitted allreduce 'g.0' for 2 s (rank 0 has)";
  EXPECT_NE(StallNews("j", With(a), With(c)), "");
  EXPECT_NE(StallShape("allreduce 'layer3s'"), StallShape("allreduce 'layer4s'"));
}

TEST(StallNews, ItsEndIsSaidOnlyAfterProgress) {
  const std::string a = "rank 1 on vm has not responded for 3 s: rank 0 waits for it";
  EXPECT_EQ(StallNews("j", With(a, 4), With("", 4)), "hvdrun: job j is making progress again");
  // A new generation cleared the reports (Job::NewGeneration): its own line says what changed.
  EXPECT_EQ(StallNews("j", With(a, 4), With("", 5)), "");
  // A stall that goes on in the new generation is reported there again.
  EXPECT_EQ(StallNews("j", With("", 5), With(a, 5)), "hvdrun: job j stalled: " + a);
  EXPECT_EQ(StallNews("j", With(""), With("")), "");
}

}  // namespace
}  // namespace hvd::cli
