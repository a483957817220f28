// base/hex.h: escaped bytes and numbers in hex.
#include "base/hex.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace hvd::base {
namespace {

TEST(HexTest, BytesAndNumbers) {
  std::string out;
  AppendHexByte(0x1b, &out);
  AppendHexByte(0xaf, &out, /*upper=*/true);
  AppendHexByte(0, &out);
  EXPECT_EQ(out, "1bAF00");
  EXPECT_EQ(Hex(0), "0");
  EXPECT_EQ(Hex(255), "ff");
  EXPECT_EQ(Hex(255, 4), "00ff");
  EXPECT_EQ(Hex(0x54445648), "54445648");
  EXPECT_EQ(Hex(~uint64_t{0}, 16), "ffffffffffffffff");
  EXPECT_EQ(Hex(1, 16), "0000000000000001");
}

}  // namespace
}  // namespace hvd::base
