// The float16 and bfloat16 conversions of the reduction kernels (collectives/reduce.h): every
// half exactly, round trips, edge cases, and rounding against an independent nearest-value oracle
// (and against F16C where the CPU has it).
#include "collectives/reduce.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace hvd::runtime::collectives {
namespace {

uint32_t Bits(float f) {
  return std::bit_cast<uint32_t>(f);
}
float FromBits(uint32_t b) {
  return std::bit_cast<float>(b);
}

// ---- Independent conversion oracles --------------------------------------------------------

// Exact value of a finite half.
double HalfValue(uint16_t h) {
  const int exp = (h >> 10) & 0x1f;
  const int mant = h & 0x3ff;
  const double v = exp == 0 ? std::ldexp(mant, -24) : std::ldexp(mant + 1024, exp - 25);
  return (h & 0x8000) ? -v : v;
}

// Nearest half to a finite float, ties to even, by binary search over the ordered positive halves.
uint16_t OracleFloatToHalf(float f) {
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const double a = std::fabs(static_cast<double>(f));
  if (a >= 65520.0) return sign | 0x7c00;  // halfway past the largest half (65504) and beyond
  uint16_t lo = 0, hi = 0x7bff;            // largest half with value <= a
  while (lo < hi) {
    const uint16_t mid = static_cast<uint16_t>((lo + hi + 1) / 2);
    if (HalfValue(mid) <= a) {
      lo = mid;
    } else {
      hi = static_cast<uint16_t>(mid - 1);
    }
  }
  if (lo == 0x7bff) return sign | lo;  // a < 65520 here
  const double below = a - HalfValue(lo), above = HalfValue(lo + 1) - a;
  uint16_t r = lo;
  if (above < below || (above == below && (lo & 1))) r = static_cast<uint16_t>(lo + 1);
  return sign | r;
}

// Nearest bfloat16 to a finite float, ties to even: candidates are the truncation and the next.
uint16_t OracleFloatToBF16(float f) {
  const uint32_t b = Bits(f);
  const uint16_t lo = static_cast<uint16_t>(b >> 16);
  const double a = std::fabs(static_cast<double>(f));
  const double vlo = std::fabs(static_cast<double>(FromBits(uint32_t{lo} << 16)));
  const uint16_t hi = static_cast<uint16_t>(lo + 1);  // next magnitude (may be Inf)
  const double vhi = (hi & 0x7fff) == 0x7f80
                         ? std::ldexp(1.0, 128)  // "Inf" rounds like 2^128
                         : std::fabs(static_cast<double>(FromBits(uint32_t{hi} << 16)));
  if (a - vlo < vhi - a || (a - vlo == vhi - a && (lo & 1) == 0)) return lo;
  return hi;
}

// ---- Conversions ----------------------------------------------------------------------------

TEST(HalfConversion, EveryHalfToFloatIsExact) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const float f = HalfToFloat(static_cast<uint16_t>(h));
    const int exp = (h >> 10) & 0x1f;
    if (exp == 0x1f && (h & 0x3ff)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << h;
      EXPECT_TRUE(Bits(f) & 0x00400000u) << "NaN must come out quiet: " << std::hex << h;
      EXPECT_EQ(std::signbit(f), (h & 0x8000) != 0);
    } else if (exp == 0x1f) {
      EXPECT_TRUE(std::isinf(f) && std::signbit(f) == ((h & 0x8000) != 0)) << std::hex << h;
    } else {
      ASSERT_EQ(static_cast<double>(f), HalfValue(static_cast<uint16_t>(h))) << std::hex << h;
      EXPECT_EQ(std::signbit(f), (h & 0x8000) != 0) << std::hex << h;  // -0 stays -0
    }
  }
}

TEST(HalfConversion, RoundTripsEveryHalf) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const uint16_t back = FloatToHalf(HalfToFloat(static_cast<uint16_t>(h)));
    if (((h >> 10) & 0x1f) == 0x1f && (h & 0x3ff)) {
      EXPECT_EQ(back & 0x7e00, 0x7e00) << "NaN stays a quiet NaN: " << std::hex << h;
      EXPECT_EQ(back & 0x8000, h & 0x8000);
    } else {
      ASSERT_EQ(back, h) << std::hex << h;
    }
  }
}

TEST(HalfConversion, EdgeCases) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(FloatToHalf(0.0f), 0x0000);
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xc000);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(FloatToHalf(65519.996f), 0x7bff);  // just below the halfway point
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00);    // halfway: ties to even = Inf
  EXPECT_EQ(FloatToHalf(-1e6f), 0xfc00);
  EXPECT_EQ(FloatToHalf(inf), 0x7c00);
  EXPECT_EQ(FloatToHalf(-inf), 0xfc00);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -14)), 0x0400);  // smallest normal
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -25)), 0x0000);  // tie between 0 and 1 ulp: even
  EXPECT_EQ(FloatToHalf(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
  EXPECT_EQ(FloatToHalf(std::ldexp(3.0f, -25)), 0x0002);     // tie 1|2 -> 2
  EXPECT_EQ(FloatToHalf(std::ldexp(5.0f, -25)), 0x0002);     // tie 2|3 -> 2
  EXPECT_EQ(FloatToHalf(std::ldexp(2047.0f, -25)), 0x0400);  // tie 0x3ff|0x400 -> smallest normal
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie -> even
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(3.0f, -11)), 0x3c02);  // tie -> even (up)
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)), 0x3c01);
  EXPECT_EQ(FloatToHalf(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(FloatToHalf(-std::numeric_limits<float>::denorm_min()), 0x8000);
  const uint16_t nan = FloatToHalf(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7e00, 0x7e00);
  const uint16_t snan = FloatToHalf(FromBits(0xff800001u));  // signalling, payload in low bits
  EXPECT_EQ(snan & 0xfe00, 0xfe00) << "quieted, sign kept, never Inf";
}

TEST(HalfConversion, MatchesNearestValueOracle) {
  // Every 251st float bit pattern (17M values), plus all patterns near the subnormal/normal and
  // overflow boundaries.
  auto check = [](uint32_t b) {
    const float f = FromBits(b);
    if (std::isnan(f)) return;
    if (std::isinf(f)) return;
    ASSERT_EQ(FloatToHalf(f), OracleFloatToHalf(f)) << std::hex << "float bits " << b;
  };
  for (uint64_t b = 0; b <= 0xffffffffu; b += 251) check(static_cast<uint32_t>(b));
  for (uint32_t center : {0x33000000u, 0x33800000u, 0x38800000u, 0x477fe000u, 0x477ff000u}) {
    for (uint32_t d = 0; d < 20000; ++d) {
      check(center - 10000 + d);
      check((center - 10000 + d) | 0x80000000u);
    }
  }
}

TEST(BFloat16Conversion, EdgeCasesAndOracle) {
  EXPECT_EQ(BFloat16ToFloat(0x3f80), 1.0f);
  EXPECT_EQ(FloatToBFloat16(1.0f), 0x3f80);
  EXPECT_EQ(FloatToBFloat16(FromBits(0x3f808000u)), 0x3f80);  // tie -> even
  EXPECT_EQ(FloatToBFloat16(FromBits(0x3f818000u)), 0x3f82);  // tie -> even (up)
  EXPECT_EQ(FloatToBFloat16(FromBits(0x3f808001u)), 0x3f81);
  EXPECT_EQ(FloatToBFloat16(FromBits(0x7f7fffffu)), 0x7f80);  // max float rounds to Inf
  EXPECT_EQ(FloatToBFloat16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(FloatToBFloat16(-std::numeric_limits<float>::infinity()), 0xff80);
  EXPECT_EQ(FloatToBFloat16(-0.0f), 0x8000);
  EXPECT_EQ(FloatToBFloat16(FromBits(0x00008000u)), 0x0000);  // subnormal tie -> even
  EXPECT_EQ(FloatToBFloat16(FromBits(0x00018000u)), 0x0002);
  const uint16_t snan = FloatToBFloat16(FromBits(0x7f800001u));  // payload only in dropped bits
  EXPECT_TRUE(std::isnan(BFloat16ToFloat(snan))) << std::hex << snan;
  EXPECT_TRUE(std::isnan(BFloat16ToFloat(FloatToBFloat16(FromBits(0xffc00000u)))));
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    const float f = BFloat16ToFloat(static_cast<uint16_t>(b));
    ASSERT_EQ(Bits(f), b << 16);
    if (!std::isnan(f)) {
      ASSERT_EQ(FloatToBFloat16(f), b);
    }
  }
  for (uint64_t b = 0; b <= 0xffffffffu; b += 509) {
    const float f = FromBits(static_cast<uint32_t>(b));
    if (!std::isfinite(f)) continue;
    ASSERT_EQ(FloatToBFloat16(f), OracleFloatToBF16(f)) << std::hex << b;
  }
}

#if defined(__x86_64__)
__attribute__((target("f16c"))) uint16_t HwFloatToHalf(float f) {
  return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
}
__attribute__((target("f16c"))) float HwHalfToFloat(uint16_t h) {
  return _cvtsh_ss(h);
}

TEST(HalfConversion, BitExactWithF16C) {
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("f16c")) GTEST_SKIP() << "no F16C on this CPU";
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    ASSERT_EQ(Bits(HalfToFloat(static_cast<uint16_t>(h))),
              Bits(HwHalfToFloat(static_cast<uint16_t>(h))))
        << std::hex << h;
  }
  for (uint64_t b = 0; b <= 0xffffffffu; b += 127) {
    const float f = FromBits(static_cast<uint32_t>(b));
    ASSERT_EQ(FloatToHalf(f), HwFloatToHalf(f)) << std::hex << "float bits " << b;
  }
}
#endif

}  // namespace
}  // namespace hvd::runtime::collectives
