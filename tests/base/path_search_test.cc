// base/path_search.h: where a program named without a '/' is looked for along $PATH.
#include "base/path_search.h"

#include <gtest/gtest.h>

namespace hvd::base {
namespace {

using V = std::vector<std::string>;

TEST(PathSearchTest, EveryEntryInOrderAndEmptyOnesAreTheCurrentDirectory) {
  EXPECT_EQ(PathCandidates("python", "/usr/local/bin::/usr/bin"),
            (V{"/usr/local/bin/python", "./python", "/usr/bin/python"}));
  EXPECT_EQ(PathCandidates("t", ":/bin/", "/work"), (V{"/work/t", "/bin/t"}));
  EXPECT_EQ(PathCandidates("t", "", ""), V{"./t"});
  EXPECT_EQ(PathCandidates("t", "bin:", "/w/"), (V{"bin/t", "/w/t"}));
}

}  // namespace
}  // namespace hvd::base
