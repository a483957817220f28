// Tests for the reduction kernels (collectives/reduce.h): every dtype and op against a scalar
// reference (reduce_reference.h), odd lengths and misaligned starts (vector bodies and tails),
// integer wraparound, NaN-propagating min/max, bool's logical or/and on any byte values, Scale's
// rounding and saturation (an average's factor as an exact division), and CheckReduceDtype. The
// float16/bfloat16 conversions: half_conversion_test.cc.
#include "collectives/reduce.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "collectives/integer_scale.h"
#include "reduce_reference.h"

namespace hvd::runtime::collectives {
namespace {

using test::Get;
using test::RandomBuffer;
using test::RefElement;
using test::RefOp;
using test::SameValue;

using test::kAllTypes;
using test::kKernelOps;
using test::kLengths;
using test::MakeOperands;

// ---- ReduceInto -------------------------------------------------------------------------------

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

// Out of place: dst = a op src has the bits of copying a into dst and reducing there, for every
// type, op and length, with `a` and `src` one byte off their alignment, with and without a copy;
// `a` is left as it was. Operands whose order shows (PutOrderSensitivePairs) catch a swap.
TEST(ReduceTo, MatchesACopyThenReduceInto) {
  for (DataType t : kAllTypes) {
    const size_t es = DataTypeSize(t);
    for (ReduceOp op : kKernelOps) {
      for (size_t n : kLengths) {
        const auto [a_values, src_values, a, src] = MakeOperands(t, n, 5000);
        // The in-place kernels, each with the copy or without: GCC may commute an addition (even
        // _mm256_add_ps), so which NaN a sum of two keeps can differ between the two variants.
        std::vector<char> want = a_values, want_with_copy = a_values, copied(n * es);
        ReduceInto(want.data(), src_values.data(), n, t, op);
        ReduceIntoCopy(want_with_copy.data(), src_values.data(), copied.data(), n, t, op);
        for (bool with_copy : {false, true}) {
          std::vector<char> dst(n * es, '\x11'), copy(n * es + 1, '\x5a');
          ReduceTo(dst.data(), a.data() + 1, src.data() + 1, with_copy ? copy.data() + 1 : nullptr,
                   n, t, op);
          const std::string what = std::string(DataTypeName(t)) + " " +
                                   std::string(ReduceOpName(op)) + " n=" + std::to_string(n) +
                                   (with_copy ? " with a copy" : "");
          ASSERT_TRUE(dst == (with_copy ? want_with_copy : want)) << what;
          ASSERT_TRUE(std::equal(a_values.begin(), a_values.end(), a.begin() + 1)) << what;
          ASSERT_EQ(copy[0], '\x5a') << what;
          if (with_copy) {
            ASSERT_TRUE(std::equal(copied.begin(), copied.end(), copy.begin() + 1)) << what;
          }
        }
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

// An average's factor (the double nearest 1/n, or a postscale's 1/k over n) divides exactly:
// ties and sums past 2^53 land on the nearest integer to sum / n, where the product misses them.
TEST(Scale, AnAveragesFactorDividesExactly) {
  EXPECT_EQ(ExactDivisor(1.0 / 3), 3);
  EXPECT_EQ(ExactDivisor(1.0 / 49), 49);
  EXPECT_EQ(ExactDivisor(0.5 / 3), 6);  // a postscale of 1/2 on a 3-rank average
  EXPECT_EQ(ExactDivisor(0.5), 2);
  EXPECT_EQ(ExactDivisor(1.0 / 2147483648.0), int64_t{1} << 31);
  // Postscale and size rounded apart: (1/3) / 11 is not the double nearest 1/33, yet divides.
  EXPECT_NE((1.0 / 3) / 11, 1.0 / 33);
  EXPECT_EQ(ExactDivisor((1.0 / 3) / 11), 33);
  EXPECT_EQ(ExactDivisor(std::nextafter(1.0 / 3, 1.0)), 3);  // 1 ulp off: still 1/3
  // A postscale of 1/6 on an 11-rank average: 33 / 66 is a tie, which the product misses.
  int32_t tie[] = {33, -33};
  Scale(tie, 2, DataType::kInt32, (1.0 / 6) / 11);
  EXPECT_EQ(tie[0], 1);
  EXPECT_EQ(tie[1], -1);
  for (double f : {1.0, 0.4, 0.3, 2.0 / 3, -1.0 / 3, 0.0, 1.0 / 3 + 1e-14, 0.33333333333333,
                   0x1p-40, std::nan(""), std::numeric_limits<double>::infinity()}) {
    EXPECT_EQ(ExactDivisor(f), 0) << f;
  }

  // 49 ranks averaging 1: 49 x double(1/49) = 0.9999999999999999.
  int32_t one = 49;
  Scale(&one, 1, DataType::kInt32, 1.0 / 49);
  EXPECT_EQ(one, 1);
  // Sums over 6 ranks: halves go away from zero whatever double(1/6)'s error.
  std::vector<int16_t> six = {3, -3, 9, -9, 15, 2, -2, 4, 0};
  Scale(six.data(), six.size(), DataType::kInt16, 1.0 / 6);
  EXPECT_EQ(six, (std::vector<int16_t>{1, -1, 2, -2, 3, 0, 0, 1, 0}));
  std::vector<uint8_t> u = {3, 255, 254, 1};
  Scale(u.data(), u.size(), DataType::kUInt8, 1.0 / 6);
  EXPECT_EQ(u, (std::vector<uint8_t>{1, 43, 42, 0}));  // 42.5 -> 43, 42.33 -> 42
  // 3 x (2^60 + 7) / 3 = 2^60 + 7 exactly (the product with double(1/3) is 64 short).
  const int64_t base = (int64_t{1} << 60) + 7;
  int64_t big[] = {3 * base, -3 * base, std::numeric_limits<int64_t>::max(),
                   std::numeric_limits<int64_t>::min()};
  Scale(big, 4, DataType::kInt64, 1.0 / 3);
  EXPECT_EQ(big[0], base);
  EXPECT_EQ(big[1], -base);
  EXPECT_EQ(big[2], std::numeric_limits<int64_t>::max() / 3);      // remainder 1: rounds down
  EXPECT_EQ(big[3], std::numeric_limits<int64_t>::min() / 3 - 1);  // remainder -2: away
  EXPECT_EQ(RoundedQuotient(7, 2), 4);
  EXPECT_EQ(RoundedQuotient(-7, 2), -4);
  EXPECT_EQ(RoundedQuotient(5, 4), 1);
  EXPECT_EQ(RoundedQuotient(-5, 4), -1);
}

}  // namespace
}  // namespace hvd::runtime::collectives
