// base/errno_text.h: errno as the text and its name.
#include "base/errno_text.h"

#include <gtest/gtest.h>

#include <cerrno>

namespace hvd::base {
namespace {

TEST(ErrnoTextTest, TextAndName) {
  EXPECT_EQ(ErrnoText(ENOENT), "No such file or directory (ENOENT)");
  EXPECT_EQ(ErrnoText(ECONNREFUSED), "Connection refused (ECONNREFUSED)");
}

}  // namespace
}  // namespace hvd::base
