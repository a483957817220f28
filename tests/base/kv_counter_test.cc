// base/kv_counter.h: a rendezvous Add takes plain decimal int64 values only and never wraps.
#include "base/kv_counter.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace hvd::base {
namespace {

TEST(KvCounterTest, PlainDecimalsParse) {
  int64_t v = 0;
  ASSERT_TRUE(ParseCounter("s", "k", "42", &v).ok());
  EXPECT_EQ(v, 42);
  ASSERT_TRUE(ParseCounter("s", "k", "-7", &v).ok());
  EXPECT_EQ(v, -7);
}

TEST(KvCounterTest, AnythingElseNamesTheStoreKeyAndValue) {
  int64_t v = 0;
  for (const char* bad : {"", "-", " 1", "+1", "1x", "99999999999999999999"}) {
    Status s = ParseCounter("memory store", "job/a/n", bad, &v);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(s.message(), std::string("memory store: Add on key 'job/a/n' whose value '") + bad +
                               "' is not a decimal int64");
  }
}

TEST(KvCounterTest, OverflowIsAnErrorNotAWrap) {
  int64_t sum = 0;
  ASSERT_TRUE(AddCounter("s", "k", 40, 2, &sum).ok());
  EXPECT_EQ(sum, 42);
  Status s = AddCounter("s", "k", INT64_MAX, 1, &sum);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "s: Add on key 'k' overflows int64 (9223372036854775807 + 1)");
}

}  // namespace
}  // namespace hvd::base
