// The reduction kernels' scalar reference for reduce_test.cc, written independently of the
// kernels (collectives/reduce.h): one element at a time with each dtype's semantics, elements read
// back as doubles, and random buffers with NaN, Inf and any true byte mixed in.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

#include "collectives/reduce.h"

namespace hvd::runtime::collectives::test {

// Scalar reference semantics, written independently of the kernels.
template <typename T>
inline T RefOp(T a, T b, ReduceOp op) {
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
inline double Get(const std::vector<char>& buf, size_t i, DataType t) {
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
inline uint8_t RefBool(uint8_t a, uint8_t b, ReduceOp op) {
  const bool x = a != 0, y = b != 0;
  return (op == ReduceOp::kMin || op == ReduceOp::kProduct) ? (x && y) : (x || y);
}

// Reference for one element: dst op src with the dtype's semantics.
inline void RefElement(char* d, const char* s, DataType t, ReduceOp op) {
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

// Every dtype, the element-wise ops the kernels take (kAverage is a sum, then Scale) and lengths
// around the kernels' vector widths and blocks.
inline constexpr DataType kAllTypes[] = {
    DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16,
    DataType::kInt8,    DataType::kUInt8,   DataType::kInt32,   DataType::kInt64,
    DataType::kInt16,   DataType::kBool};
inline constexpr ReduceOp kKernelOps[] = {ReduceOp::kSum, ReduceOp::kProduct, ReduceOp::kMin,
                                          ReduceOp::kMax};
inline constexpr size_t kLengths[] = {0, 1, 7, 1000, (1u << 20) + 3};

// Float operands whose order shows in min and max (and in which NaN a sum keeps): +0 against
// -0 both ways, two different NaNs, a NaN against a number both ways, at elements 0-4.
inline void PutOrderSensitivePairs(DataType t, size_t n, std::vector<char>* a,
                                   std::vector<char>* src) {
  uint64_t pos0 = 0, neg0, nan1, nan2;
  switch (t) {
    case DataType::kFloat32:
      neg0 = 0x80000000u, nan1 = 0x7fc00001u, nan2 = 0xffc00002u;
      break;
    case DataType::kFloat64:
      neg0 = uint64_t{1} << 63, nan1 = 0x7ff8000000000001u, nan2 = 0xfff8000000000002u;
      break;
    case DataType::kFloat16:
      neg0 = 0x8000u, nan1 = 0x7e01u, nan2 = 0xfe02u;
      break;
    case DataType::kBFloat16:
      neg0 = 0x8000u, nan1 = 0x7fc1u, nan2 = 0xffc2u;
      break;
    default:
      return;
  }
  const uint64_t pairs[][2] = {
      {pos0, neg0}, {neg0, pos0}, {nan1, nan2}, {nan1, pos0}, {neg0, nan2}};
  const size_t es = DataTypeSize(t);
  for (size_t i = 0; i < 5 && i < n; ++i) {
    std::memcpy(a->data() + i * es, &pairs[i][0], es);  // little-endian: the low bytes
    std::memcpy(src->data() + i * es, &pairs[i][1], es);
  }
}

// Random contents: floats in [-4, 4] (products of 2 stay small), half types from such floats
// with some NaN and Inf sprinkled in, integers over their full range, bool a quarter false (0)
// and the rest true as any byte 1..255.
inline std::vector<char> RandomBuffer(size_t count, DataType t, uint64_t seed) {
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

inline bool SameValue(double a, double b) {
  return (std::isnan(a) && std::isnan(b)) || a == b;
}

// Operands of an out-of-place kernel test: random values with order-sensitive pairs first
// (PutOrderSensitivePairs), and the same bytes one byte past an aligned start (a.data() + 1,
// src.data() + 1), since the kernels take operands at any alignment.
struct OutOfPlaceOperands {
  std::vector<char> a_values, src_values, a, src;
};

inline OutOfPlaceOperands MakeOperands(DataType t, size_t n, uint64_t seed) {
  OutOfPlaceOperands o;
  o.a_values = RandomBuffer(n, t, seed + n);
  o.src_values = RandomBuffer(n, t, seed + 1000 + n);
  PutOrderSensitivePairs(t, n, &o.a_values, &o.src_values);
  const size_t bytes = n * DataTypeSize(t);
  o.a.assign(bytes + 1, 0);
  o.src.assign(bytes + 1, 0);
  if (n > 0) {
    std::memcpy(o.a.data() + 1, o.a_values.data(), bytes);
    std::memcpy(o.src.data() + 1, o.src_values.data(), bytes);
  }
  return o;
}

}  // namespace hvd::runtime::collectives::test
