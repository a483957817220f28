// Tests for the reduction kernels (collectives/reduce.h): every dtype and op against a scalar
// reference, odd lengths and misaligned starts (vector bodies and tails), integer wraparound,
// NaN-propagating min/max, bool's logical or/and on any byte values, Scale's rounding and
// saturation, CheckReduceDtype, and the float16/bfloat16 conversions against an independent
// nearest-value oracle (and against F16C where the CPU has it).
#include "collectives/reduce.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace hvd::runtime::collectives {
namespace {

constexpr DataType kAllTypes[] = {DataType::kFloat32,  DataType::kFloat64, DataType::kFloat16,
                                  DataType::kBFloat16, DataType::kInt8,    DataType::kUInt8,
                                  DataType::kInt32,    DataType::kInt64,   DataType::kInt16,
                                  DataType::kBool};
constexpr ReduceOp kKernelOps[] = {ReduceOp::kSum, ReduceOp::kProduct, ReduceOp::kMin,
                                   ReduceOp::kMax};
const size_t kLengths[] = {0, 1, 7, 1000, (1u << 20) + 3};

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

// ---- ReduceInto -------------------------------------------------------------------------------

// Scalar reference semantics, written independently of the kernels.
template <typename T>
T RefOp(T a, T b, ReduceOp op) {
  if constexpr (std::is_floating_point_v<T>) {
    if (op == ReduceOp::kMin || op == ReduceOp::kMax) {
      if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<T>::quiet_NaN();
      return op == ReduceOp::kMin ? std::min(a, b) : std::max(a, b);
    }
    return op == ReduceOp::kProduct ? a * b : a + b;
  } else {
    // Integer sum/product wrap: compute in 64-bit unsigned, truncate (modular since C++20).
    const uint64_t ua = static_cast<uint64_t>(a), ub = static_cast<uint64_t>(b);
    switch (op) {
      case ReduceOp::kMin:
        return std::min(a, b);
      case ReduceOp::kMax:
        return std::max(a, b);
      case ReduceOp::kProduct:
        return static_cast<T>(ua * ub);
      default:
        return static_cast<T>(ua + ub);
    }
  }
}

// Elements as doubles (halves widened), for reference math and messages.
double Get(const std::vector<char>& buf, size_t i, DataType t) {
  const char* p = buf.data() + i * DataTypeSize(t);
  auto load = [p](auto v) {
    std::memcpy(&v, p, sizeof(v));
    return v;
  };
  switch (t) {
    case DataType::kFloat32:
      return load(float{});
    case DataType::kFloat64:
      return load(double{});
    case DataType::kFloat16:
      return HalfToFloat(load(uint16_t{}));
    case DataType::kBFloat16:
      return BFloat16ToFloat(load(uint16_t{}));
    case DataType::kInt8:
      return load(int8_t{});
    case DataType::kUInt8:
      return load(uint8_t{});
    case DataType::kInt32:
      return load(int32_t{});
    case DataType::kInt64:
      return static_cast<double>(load(int64_t{}));
    case DataType::kInt16:
      return load(int16_t{});
    case DataType::kBool:
      return load(uint8_t{});  // the byte itself, so that a result other than 0 or 1 shows
  }
  return 0;
}

// bool, from the bytes' truth: sum and max are or, min and product and; the result is 0 or 1.
uint8_t RefBool(uint8_t a, uint8_t b, ReduceOp op) {
  const bool x = a != 0, y = b != 0;
  return (op == ReduceOp::kMin || op == ReduceOp::kProduct) ? (x && y) : (x || y);
}

// Reference for one element: dst op src with the dtype's semantics.
void RefElement(char* d, const char* s, DataType t, ReduceOp op) {
  auto apply = [&](auto zero) {
    using T = decltype(zero);
    T a, b;
    std::memcpy(&a, d, sizeof(T));
    std::memcpy(&b, s, sizeof(T));
    T r = RefOp(a, b, op);
    std::memcpy(d, &r, sizeof(T));
  };
  uint16_t a, b, r;
  switch (t) {
    case DataType::kFloat32:
      return apply(float{});
    case DataType::kFloat64:
      return apply(double{});
    case DataType::kInt8:
      return apply(int8_t{});
    case DataType::kUInt8:
      return apply(uint8_t{});
    case DataType::kInt32:
      return apply(int32_t{});
    case DataType::kInt64:
      return apply(int64_t{});
    case DataType::kInt16:
      return apply(int16_t{});
    case DataType::kBool: {
      uint8_t x, y;
      std::memcpy(&x, d, 1);
      std::memcpy(&y, s, 1);
      x = RefBool(x, y, op);
      std::memcpy(d, &x, 1);
      return;
    }
    case DataType::kFloat16:
    case DataType::kBFloat16: {
      std::memcpy(&a, d, 2);
      std::memcpy(&b, s, 2);
      const bool h = t == DataType::kFloat16;
      const float fa = h ? HalfToFloat(a) : BFloat16ToFloat(a);
      const float fb = h ? HalfToFloat(b) : BFloat16ToFloat(b);
      const float fr = RefOp(fa, fb, op);
      r = h ? FloatToHalf(fr) : FloatToBFloat16(fr);
      std::memcpy(d, &r, 2);
      return;
    }
  }
}

// Random contents: floats in [-4, 4] (products of 2 stay small), half types from such floats
// with some NaN and Inf sprinkled in, integers over their full range, bool a quarter false (0)
// and the rest true as any byte 1..255.
std::vector<char> RandomBuffer(size_t count, DataType t, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> real(-4.0, 4.0);
  std::vector<char> buf(count * DataTypeSize(t));
  for (size_t i = 0; i < count; ++i) {
    char* p = buf.data() + i * DataTypeSize(t);
    const uint64_t bits = rng();
    double v = real(rng);
    if (i % 97 == 5) v = std::numeric_limits<double>::quiet_NaN();
    if (i % 89 == 3) v = (bits & 1) ? std::numeric_limits<double>::infinity() : -1e30;
    switch (t) {
      case DataType::kFloat32: {
        float f = static_cast<float>(v);
        std::memcpy(p, &f, 4);
        break;
      }
      case DataType::kFloat64:
        std::memcpy(p, &v, 8);
        break;
      case DataType::kFloat16: {
        uint16_t h = FloatToHalf(static_cast<float>(v));
        std::memcpy(p, &h, 2);
        break;
      }
      case DataType::kBFloat16: {
        uint16_t h = FloatToBFloat16(static_cast<float>(v));
        std::memcpy(p, &h, 2);
        break;
      }
      case DataType::kBool:
        *p = static_cast<char>((bits & 3) == 0 ? 0 : 1 + (bits >> 8) % 255);
        break;
      default:
        std::memcpy(p, &bits, DataTypeSize(t));
        break;
    }
  }
  return buf;
}

bool SameValue(double a, double b) {
  return (std::isnan(a) && std::isnan(b)) || a == b;
}

TEST(ReduceInto, EveryTypeOpAndLengthMatchesReference) {
  for (DataType t : kAllTypes) {
    for (ReduceOp op : kKernelOps) {
      for (size_t n : kLengths) {
        // Start one element in so vector loops see a misaligned head and a ragged tail.
        std::vector<char> dst = RandomBuffer(n + 2, t, 1000 + n);
        const std::vector<char> src = RandomBuffer(n + 2, t, 2000 + n);
        std::vector<char> want = dst;
        const size_t es = DataTypeSize(t);
        for (size_t i = 1; i <= n; ++i)
          RefElement(want.data() + i * es, src.data() + i * es, t, op);
        ReduceInto(dst.data() + es, src.data() + es, n, t, op);
        int bad = 0;
        for (size_t i = 0; i < n + 2 && bad < 5; ++i) {
          const double got = Get(dst, i, t), exp = Get(want, i, t);
          if (!SameValue(got, exp)) {
            ADD_FAILURE() << DataTypeName(t) << " " << ReduceOpName(op) << " n=" << n << " element "
                          << i << ": expected " << exp << ", got " << got;
            ++bad;
          }
        }
      }
    }
  }
}

TEST(ReduceInto, IntegerWraparound) {
  int8_t a8[] = {127, -128, 100, -1};
  const int8_t b8[] = {1, -1, 100, -1};
  ReduceInto(a8, b8, 4, DataType::kInt8, ReduceOp::kSum);
  EXPECT_EQ(a8[0], -128);
  EXPECT_EQ(a8[1], 127);
  EXPECT_EQ(a8[2], -56);
  EXPECT_EQ(a8[3], -2);
  uint8_t u8[] = {200, 16};
  const uint8_t v8[] = {100, 16};
  ReduceInto(u8, v8, 2, DataType::kUInt8, ReduceOp::kProduct);
  EXPECT_EQ(u8[0], static_cast<uint8_t>(20000 % 256));
  EXPECT_EQ(u8[1], 0);
  int32_t a32[] = {std::numeric_limits<int32_t>::max(), 65536};
  const int32_t b32[] = {1, 65536};
  ReduceInto(a32, b32, 1, DataType::kInt32, ReduceOp::kSum);
  ReduceInto(a32 + 1, b32 + 1, 1, DataType::kInt32, ReduceOp::kProduct);
  EXPECT_EQ(a32[0], std::numeric_limits<int32_t>::min());
  EXPECT_EQ(a32[1], 0);
  int64_t a64[] = {std::numeric_limits<int64_t>::min()};
  const int64_t b64[] = {-1};
  ReduceInto(a64, b64, 1, DataType::kInt64, ReduceOp::kSum);
  EXPECT_EQ(a64[0], std::numeric_limits<int64_t>::max());
}

template <typename T>
std::vector<T> Repeat(std::vector<T> v, size_t times) {
  std::vector<T> out;
  for (size_t i = 0; i < times; ++i) out.insert(out.end(), v.begin(), v.end());
  return out;
}

TEST(ReduceInto, Int16WrapsAndOrders) {
  int16_t a[] = {32767, -32768, 300, -32768, 255, -1, -32768, 7};
  const int16_t b[] = {1, -1, 300, -1, 257, -1, 32767, -7};
  int16_t sum[8], prod[8], lo[8], hi[8];
  std::memcpy(sum, a, sizeof(a));
  std::memcpy(prod, a, sizeof(a));
  std::memcpy(lo, a, sizeof(a));
  std::memcpy(hi, a, sizeof(a));
  ReduceInto(sum, b, 8, DataType::kInt16, ReduceOp::kSum);
  ReduceInto(prod, b, 8, DataType::kInt16, ReduceOp::kProduct);
  ReduceInto(lo, b, 8, DataType::kInt16, ReduceOp::kMin);
  ReduceInto(hi, b, 8, DataType::kInt16, ReduceOp::kMax);
  EXPECT_EQ(std::vector<int16_t>(sum, sum + 8),
            (std::vector<int16_t>{-32768, 32767, 600, 32767, 512, -2, -1, 0}));
  // 300 * 300 = 90000 = 65536 + 24464; 255 * 257 = 65535 = -1; 0xffff * 0xffff (the product
  // that overflows int if computed there) = 1 mod 2^16; -32768 * -1 = 32768 = -32768.
  EXPECT_EQ(std::vector<int16_t>(prod, prod + 8),
            (std::vector<int16_t>{32767, -32768, 24464, -32768, -1, 1, -32768, -49}));
  EXPECT_EQ(std::vector<int16_t>(lo, lo + 8),
            (std::vector<int16_t>{1, -32768, 300, -32768, 255, -1, -32768, -7}));
  EXPECT_EQ(std::vector<int16_t>(hi, hi + 8),
            (std::vector<int16_t>{32767, -1, 300, -1, 257, -1, 32767, 7}));
}

// Every pair of bytes from a set with 0, 1 and other true bytes, with each op: or/and of their
// truth, written as 0 or 1.
TEST(ReduceInto, BoolIsLogicalOnAnyTrueByte) {
  const uint8_t values[] = {0, 1, 2, 0x7f, 0x80, 0xfe, 0xff};
  std::vector<uint8_t> a, b;
  for (uint8_t x : values) {
    for (uint8_t y : values) {
      a.push_back(x);
      b.push_back(y);
    }
  }
  // Repeated past a vector width and to an odd length, so both body and tail see every pair.
  a = Repeat(a, 5);
  b = Repeat(b, 5);
  ASSERT_EQ(a.size() % 2, 1u);
  struct Case {
    ReduceOp op;
    bool is_and;
  };
  for (Case c : {Case{ReduceOp::kSum, false}, Case{ReduceOp::kMax, false},
                 Case{ReduceOp::kMin, true}, Case{ReduceOp::kProduct, true}}) {
    std::vector<uint8_t> d = a;
    ReduceInto(d.data(), b.data(), d.size(), DataType::kBool, c.op);
    for (size_t i = 0; i < d.size(); ++i) {
      const bool x = a[i] != 0, y = b[i] != 0;
      const uint8_t want = c.is_and ? (x && y) : (x || y);
      ASSERT_EQ(d[i], want) << ReduceOpName(c.op) << "(" << int{a[i]} << ", " << int{b[i]} << ")";
    }
  }
}

// The ring reduces from a shared-memory ring at any byte offset and forwards through `copy`:
// int16 and bool from a src (and into a copy) one byte off their alignment, at every length.
TEST(ReduceInto, NewTypesFromUnalignedSourceIntoCopy) {
  for (DataType t : {DataType::kInt16, DataType::kBool}) {
    const size_t es = DataTypeSize(t);
    for (ReduceOp op : kKernelOps) {
      for (size_t n : kLengths) {
        std::vector<char> dst = RandomBuffer(n, t, 3000 + n);
        const std::vector<char> src_values = RandomBuffer(n, t, 4000 + n);
        std::vector<char> src(n * es + 1), copy(n * es + 1, '\x5a');
        if (n > 0) std::memcpy(src.data() + 1, src_values.data(), n * es);
        std::vector<char> want = dst;
        for (size_t i = 0; i < n; ++i)
          RefElement(want.data() + i * es, src_values.data() + i * es, t, op);
        ReduceIntoCopy(dst.data(), src.data() + 1, copy.data() + 1, n, t, op);
        ASSERT_TRUE(dst == want) << DataTypeName(t) << " " << ReduceOpName(op) << " n=" << n;
        ASSERT_EQ(copy[0], '\x5a');
        ASSERT_TRUE(std::equal(want.begin(), want.end(), copy.begin() + 1))
            << DataTypeName(t) << " " << ReduceOpName(op) << " n=" << n << ": copy differs";
      }
    }
  }
}

TEST(CheckReduceDtype, OnlyBoolAverageIsRefused) {
  for (int t = 0; t < kNumDataTypes; ++t) {
    for (int o = 0; o < kNumReduceOps; ++o) {
      const auto dtype = static_cast<DataType>(t);
      const auto op = static_cast<ReduceOp>(o);
      const Status s = CheckReduceDtype(dtype, op);
      if (dtype == DataType::kBool && op == ReduceOp::kAverage) {
        EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
        EXPECT_EQ(s.message(),
                  "average is not defined for bool tensors; use Sum (logical or) or Min (logical "
                  "and)");
      } else {
        EXPECT_TRUE(s.ok()) << DataTypeName(dtype) << " " << ReduceOpName(op) << ": "
                            << s.ToString();
      }
    }
  }
}

TEST(ReduceInto, MinMaxPropagateNaNInEveryFloatType) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  // NaN on either side, Inf, and ordinary values; repeated so vector bodies see them too.
  const std::vector<float> a = Repeat<float>({nan, 1.0f, nan, -inf, 2.0f, inf, -3.0f, 0.5f}, 5);
  const std::vector<float> b = Repeat<float>({1.0f, nan, nan, 5.0f, -inf, 1.0f, -2.0f, 0.25f}, 5);
  for (DataType t :
       {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16}) {
    for (ReduceOp op : {ReduceOp::kMin, ReduceOp::kMax}) {
      std::vector<char> d(a.size() * DataTypeSize(t)), s(d.size());
      for (size_t i = 0; i < a.size(); ++i) {
        auto put = [&](std::vector<char>& buf, float v) {
          char* p = buf.data() + i * DataTypeSize(t);
          if (t == DataType::kFloat32) std::memcpy(p, &v, 4);
          if (t == DataType::kFloat64) {
            double x = v;
            std::memcpy(p, &x, 8);
          }
          if (t == DataType::kFloat16) {
            uint16_t h = FloatToHalf(v);
            std::memcpy(p, &h, 2);
          }
          if (t == DataType::kBFloat16) {
            uint16_t h = FloatToBFloat16(v);
            std::memcpy(p, &h, 2);
          }
        };
        put(d, a[i]);
        put(s, b[i]);
      }
      ReduceInto(d.data(), s.data(), a.size(), t, op);
      for (size_t i = 0; i < a.size(); ++i) {
        const double exp = RefOp<double>(a[i], b[i], op);
        EXPECT_TRUE(SameValue(Get(d, i, t), exp))
            << DataTypeName(t) << " " << ReduceOpName(op) << "(" << a[i] << ", " << b[i]
            << ") = " << Get(d, i, t);
      }
    }
  }
}

TEST(ReduceInto, HalfAccumulatesInFloat32) {
  // The sum is formed in float32 and rounded once: above 2048 float16 has spacing 2, so
  // 2048 + 1 = 2049 is a tie that rounds to even (2048) and 2048 + 3 = 2051 to 2052.
  uint16_t d[] = {FloatToHalf(2048.0f), FloatToHalf(1.5f), FloatToHalf(2048.0f)};
  const uint16_t s[] = {FloatToHalf(1.0f), FloatToHalf(0.25f), FloatToHalf(3.0f)};
  ReduceInto(d, s, 3, DataType::kFloat16, ReduceOp::kSum);
  EXPECT_EQ(HalfToFloat(d[0]), 2048.0f);
  EXPECT_EQ(HalfToFloat(d[1]), 1.75f);
  EXPECT_EQ(HalfToFloat(d[2]), 2052.0f);  // 2051 is a tie between 2050 and 2052: even mantissa
  uint16_t big[] = {FloatToHalf(60000.0f)};
  const uint16_t big2[] = {FloatToHalf(60000.0f)};
  ReduceInto(big, big2, 1, DataType::kFloat16, ReduceOp::kSum);
  EXPECT_TRUE(std::isinf(HalfToFloat(big[0])));
}

// ---- Scale ---------------------------------------------------------------------------------

TEST(Scale, IntegersRoundToNearestTiesAwayAndSaturate) {
  std::vector<int32_t> v = {5, -5, 3, -3, 1, -1, 0, 7};
  Scale(v.data(), v.size(), DataType::kInt32, 0.5);
  EXPECT_EQ(v, (std::vector<int32_t>{3, -3, 2, -2, 1, -1, 0, 4}));
  std::vector<int32_t> w = {10, 11, -10, -11, 2, -2};
  Scale(w.data(), w.size(), DataType::kInt32, 1.0 / 3);
  EXPECT_EQ(w, (std::vector<int32_t>{3, 4, -3, -4, 1, -1}));
  int8_t s8[] = {100, -100, 3};
  Scale(s8, 3, DataType::kInt8, 2.0);
  EXPECT_EQ(s8[0], 127);
  EXPECT_EQ(s8[1], -128);
  EXPECT_EQ(s8[2], 6);
  uint8_t u8[] = {200, 10, 3};
  Scale(u8, 2, DataType::kUInt8, 2.0);
  Scale(u8 + 1, 2, DataType::kUInt8, -1.0);
  EXPECT_EQ(u8[0], 255);
  EXPECT_EQ(u8[1], 0);
  EXPECT_EQ(u8[2], 0);
  int64_t big[] = {(int64_t{1} << 62) + 1, std::numeric_limits<int64_t>::max(),
                   std::numeric_limits<int64_t>::min(), 9};
  Scale(big, 3, DataType::kInt64, 1.0);
  EXPECT_EQ(big[0], (int64_t{1} << 62) + 1);  // exact beyond double's 53 bits
  EXPECT_EQ(big[1], std::numeric_limits<int64_t>::max());
  EXPECT_EQ(big[2], std::numeric_limits<int64_t>::min());
  Scale(big + 3, 1, DataType::kInt64, std::nan(""));
  EXPECT_EQ(big[3], 0);
  int16_t s16[] = {20000, -20000, 3, -3, 5, -5, -32768, 9};
  Scale(s16, 6, DataType::kInt16, 2.0);
  EXPECT_EQ(std::vector<int16_t>(s16, s16 + 6),
            (std::vector<int16_t>{32767, -32768, 6, -6, 10, -10}));
  Scale(s16 + 2, 4, DataType::kInt16, 0.25);  // 1.5, -1.5, 2.5, -2.5: ties away from zero
  EXPECT_EQ(std::vector<int16_t>(s16 + 2, s16 + 6), (std::vector<int16_t>{2, -2, 3, -3}));
  Scale(s16 + 6, 1, DataType::kInt16, -1.0);  // 32768 does not fit: saturates
  EXPECT_EQ(s16[6], 32767);
  Scale(s16 + 7, 1, DataType::kInt16, std::nan(""));
  EXPECT_EQ(s16[7], 0);
}

TEST(Scale, BoolKeepsOrClearsAndNormalizes) {
  const std::vector<uint8_t> in = {0, 1, 2, 0x80, 0xff, 0, 7};
  const std::vector<uint8_t> kept = {0, 1, 1, 1, 1, 0, 1};
  for (double factor : {1.0, 0.5, 1.0 / 3, -1.0, 1e-300, std::nan("")}) {
    for (size_t n : kLengths) {
      // Offset by one byte and an odd length: the vector body and both ragged ends.
      std::vector<uint8_t> v(n + 1), want(n + 1);
      for (size_t i = 0; i < n; ++i) {
        v[i + 1] = in[i % in.size()];
        want[i + 1] = kept[i % in.size()];
      }
      Scale(v.data() + 1, n, DataType::kBool, factor);
      ASSERT_TRUE(v == want) << "factor " << factor << " n=" << n;
    }
  }
  for (double zero : {0.0, -0.0}) {
    std::vector<uint8_t> v = in;
    Scale(v.data(), v.size(), DataType::kBool, zero);
    EXPECT_EQ(v, std::vector<uint8_t>(in.size(), 0)) << "factor " << zero;
  }
}

TEST(Scale, FloatsMultiplyInTheirOwnPrecision) {
  for (size_t n : kLengths) {
    std::vector<char> f32 = RandomBuffer(n, DataType::kFloat32, 7);
    std::vector<char> f64 = RandomBuffer(n, DataType::kFloat64, 8);
    std::vector<char> f16 = RandomBuffer(n, DataType::kFloat16, 9);
    std::vector<char> b16 = RandomBuffer(n, DataType::kBFloat16, 10);
    const std::vector<char> o32 = f32, o64 = f64, o16 = f16, ob16 = b16;
    const double factor = 1.0 / 3;
    Scale(f32.data(), n, DataType::kFloat32, factor);
    Scale(f64.data(), n, DataType::kFloat64, factor);
    Scale(f16.data(), n, DataType::kFloat16, factor);
    Scale(b16.data(), n, DataType::kBFloat16, factor);
    const float ff = static_cast<float>(factor);
    for (size_t i = 0; i < n; ++i) {
      float x32;
      std::memcpy(&x32, o32.data() + 4 * i, 4);
      ASSERT_TRUE(SameValue(Get(f32, i, DataType::kFloat32), x32 * ff)) << i;
      ASSERT_TRUE(
          SameValue(Get(f64, i, DataType::kFloat64), Get(o64, i, DataType::kFloat64) * factor));
      const float h = static_cast<float>(Get(o16, i, DataType::kFloat16));
      ASSERT_TRUE(SameValue(Get(f16, i, DataType::kFloat16), HalfToFloat(FloatToHalf(h * ff))))
          << i;
      const float b = static_cast<float>(Get(ob16, i, DataType::kBFloat16));
      ASSERT_TRUE(
          SameValue(Get(b16, i, DataType::kBFloat16), BFloat16ToFloat(FloatToBFloat16(b * ff))))
          << i;
    }
  }
}

TEST(Scale, IntegerLengths) {
  for (size_t n : kLengths) {
    std::vector<int64_t> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = static_cast<int64_t>(i) - 500;
    std::vector<int8_t> w(n);
    for (size_t i = 0; i < n; ++i) w[i] = static_cast<int8_t>(i);
    std::vector<int16_t> x(n);
    for (size_t i = 0; i < n; ++i) x[i] = static_cast<int16_t>(i * 7);
    Scale(v.data(), n, DataType::kInt64, 0.25);
    Scale(w.data(), n, DataType::kInt8, 0.5);
    Scale(x.data(), n, DataType::kInt16, 1.5);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(v[i], static_cast<int64_t>(std::round((static_cast<double>(i) - 500) * 0.25)));
      ASSERT_EQ(w[i], static_cast<int8_t>(std::round(static_cast<int8_t>(i) * 0.5)));
      const double x15 = std::round(static_cast<int16_t>(i * 7) * 1.5);
      ASSERT_EQ(x[i], static_cast<int16_t>(std::clamp(x15, -32768.0, 32767.0))) << i;
    }
  }
}

}  // namespace
}  // namespace hvd::runtime::collectives
