// Assertions shared by the suites that check messages a user would read.
#pragma once

#include <gtest/gtest.h>

#include <string>

// Expects `needle` to occur in `haystack`, printing the whole haystack when it does not.
#define EXPECT_HAS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << (haystack)
