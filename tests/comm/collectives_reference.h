// Exact inputs and expected results for the collectives grid (collectives_test.cc).
//
// Allreduce covers every count x dtype x op on one mesh per rank count. Inputs are small integers
// (sum/min/max/average: [-16, 16]; product: {1, 2, -1}) so every sum and product over <= 8 ranks
// is exact in every dtype (|result| <= 256, exact even in bfloat16) and integer wraparound is
// order-independent; the expected result is therefore computed exactly, and the average exactly
// as the kernel defines it (collectives/reduce.h: float32 x * (float)(1/N), float64 x * (1/N),
// half types rounded from float32, integers rounded half away from zero in long double). bool
// inputs are any byte, a quarter of the elements false on every rank, a quarter true on every
// rank, a quarter true on one rank only and a quarter false on one rank only, so that or (sum,
// max) and and (min, product) each give both results; average is not defined on bool
// (CheckReduceDtype) and is not run.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "collectives/reduce.h"
#include "reduce_reference.h"  // kAllTypes
#include "testutil/mix.h"

namespace hvd::runtime::collectives::test {

inline constexpr ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin,
                                       ReduceOp::kMax, ReduceOp::kProduct};
inline constexpr size_t kCounts[] = {0, 1, 7, 1000, (size_t{1} << 20) + 3};
inline constexpr int kMaxReported = 8;  // mismatch lines per rank

using hvd::testing::Mix;

// Rank `rank`'s input element i for the sum-like ops, and for product.
inline int SumInput(int rank, size_t i) {
  return static_cast<int>(Mix(i * 131 + rank) % 33) - 16;
}
inline int ProdInput(int rank, size_t i) {
  static constexpr int kValues[4] = {1, 2, -1, 1};
  return kValues[Mix(i * 131 + rank + 0x5555) & 3];
}
// bool: 0, or a true byte 1..255 (the kernels must read any non-zero byte as true).
inline uint8_t BoolInput(int rank, int size, size_t i) {
  const uint64_t kind = Mix(i * 131 + 0x7777) & 3;
  const bool odd_one = Mix(i * 131 + 0x9999) % size == static_cast<uint64_t>(rank);
  const bool truth = kind == 0 ? false : kind == 1 ? true : kind == 2 ? odd_one : !odd_one;
  return truth ? static_cast<uint8_t>(1 + Mix(i * 131 + rank + 0xbbbb) % 255) : 0;
}
inline bool IsAnd(ReduceOp op) {
  return op == ReduceOp::kMin || op == ReduceOp::kProduct;
}

// int16 and bool take no path through the collectives that float16 and uint8 (same element
// sizes) do not; their kernels are checked exhaustively in reduce_test. To keep the suite's time,
// their largest count runs on up to 4 ranks only (every setup still runs their other counts).
inline bool SkipLarge(DataType t, size_t count, int size) {
  const bool narrow_extra = t == DataType::kInt16 || t == DataType::kBool;
  return narrow_extra && count > (size_t{1} << 20) && size > 4;
}

// Exact reductions over all ranks, per element (all values fit in int16).
struct Reference {
  std::vector<int16_t> sum, prod, smin, smax;
  std::vector<uint8_t> umin, umax;          // min/max of the inputs cast to uint8
  std::vector<uint8_t> any, all;            // or and and of the bool inputs, as 0 or 1
  std::vector<int8_t> mine_sum, mine_prod;  // this rank's own inputs
  std::vector<uint8_t> mine_bool;

  Reference(size_t count, int rank, int size)
      : sum(count),
        prod(count),
        smin(count),
        smax(count),
        umin(count),
        umax(count),
        any(count),
        all(count),
        mine_sum(count),
        mine_prod(count),
        mine_bool(count) {
    for (size_t i = 0; i < count; ++i) {
      int s = 0, p = 1, lo = 100, hi = -100, ulo = 255, uhi = 0;
      bool some = false, every = true;
      for (int r = 0; r < size; ++r) {
        const int v = SumInput(r, i), w = ProdInput(r, i);
        const int u = static_cast<uint8_t>(v);
        const uint8_t b = BoolInput(r, size, i);
        s += v;
        p *= w;
        lo = std::min(lo, v);
        hi = std::max(hi, v);
        ulo = std::min(ulo, u);
        uhi = std::max(uhi, u);
        some = some || b != 0;
        every = every && b != 0;
        if (r == rank) {
          mine_sum[i] = static_cast<int8_t>(v);
          mine_prod[i] = static_cast<int8_t>(w);
          mine_bool[i] = b;
        }
      }
      any[i] = some;
      all[i] = every;
      sum[i] = static_cast<int16_t>(s);
      prod[i] = static_cast<int16_t>(p);
      smin[i] = static_cast<int16_t>(lo);
      smax[i] = static_cast<int16_t>(hi);
      umin[i] = static_cast<uint8_t>(ulo);
      umax[i] = static_cast<uint8_t>(uhi);
    }
  }
};

template <typename T>
inline void Store(char* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}

// Writes the small integer v as dtype t (integers wrap, as C++20 conversions do).
inline void PutInt(char* p, DataType t, int64_t v) {
  switch (t) {
    case DataType::kFloat32:
      return Store(p, static_cast<float>(v));
    case DataType::kFloat64:
      return Store(p, static_cast<double>(v));
    case DataType::kFloat16:
      return Store(p, FloatToHalf(static_cast<float>(v)));
    case DataType::kBFloat16:
      return Store(p, FloatToBFloat16(static_cast<float>(v)));
    case DataType::kInt8:
      return Store(p, static_cast<int8_t>(v));
    case DataType::kUInt8:
      return Store(p, static_cast<uint8_t>(v));
    case DataType::kInt32:
      return Store(p, static_cast<int32_t>(v));
    case DataType::kInt64:
      return Store(p, static_cast<int64_t>(v));
    case DataType::kInt16:
      return Store(p, static_cast<int16_t>(v));
    case DataType::kBool:
      return Store(p, static_cast<uint8_t>(v != 0));
  }
}

template <typename T>
inline T Load(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// The wrapped sum as dtype t, scaled by 1/size as Scale() does: floats times the double nearest
// 1/size, integers divided by size (the nearest integer, ties away from zero).
inline void PutAverage(char* p, DataType t, int64_t sum, int size) {
  const double factor = 1.0 / size;
  auto int_avg = [&](auto wrapped) {
    using T = decltype(wrapped);
    Store(p, static_cast<T>(std::round(static_cast<long double>(wrapped) / size)));
  };
  switch (t) {
    case DataType::kFloat32:
      return Store(p, static_cast<float>(sum) * static_cast<float>(factor));
    case DataType::kFloat64:
      return Store(p, static_cast<double>(sum) * factor);
    case DataType::kFloat16:
      return Store(p, FloatToHalf(static_cast<float>(sum) * static_cast<float>(factor)));
    case DataType::kBFloat16:
      return Store(p, FloatToBFloat16(static_cast<float>(sum) * static_cast<float>(factor)));
    case DataType::kInt8:
      return int_avg(static_cast<int8_t>(sum));
    case DataType::kUInt8:
      return int_avg(static_cast<uint8_t>(sum));
    case DataType::kInt32:
      return int_avg(static_cast<int32_t>(sum));
    case DataType::kInt64:
      return int_avg(static_cast<int64_t>(sum));
    case DataType::kInt16:
      return int_avg(static_cast<int16_t>(sum));
    case DataType::kBool:
      break;  // no average on bool: the tests skip it
  }
}

inline std::string Show(const char* p, DataType t) {
  switch (t) {
    case DataType::kFloat32:
      return std::to_string(Load<float>(p));
    case DataType::kFloat64:
      return std::to_string(Load<double>(p));
    case DataType::kFloat16:
      return std::to_string(HalfToFloat(Load<uint16_t>(p)));
    case DataType::kBFloat16:
      return std::to_string(BFloat16ToFloat(Load<uint16_t>(p)));
    case DataType::kInt8:
      return std::to_string(Load<int8_t>(p));
    case DataType::kUInt8:
      return std::to_string(Load<uint8_t>(p));
    case DataType::kInt32:
      return std::to_string(Load<int32_t>(p));
    case DataType::kInt64:
      return std::to_string(Load<int64_t>(p));
    case DataType::kInt16:
      return std::to_string(Load<int16_t>(p));
    case DataType::kBool:
      return "byte " + std::to_string(Load<uint8_t>(p));
  }
  return "?";
}

// This rank's input for elements [begin, begin + n) of the reference.
inline std::vector<char> Input(const Reference& ref, size_t begin, size_t n, DataType t,
                               ReduceOp op) {
  const size_t es = DataTypeSize(t);
  std::vector<char> buf(n * es);
  for (size_t i = 0; i < n; ++i) {
    const size_t k = begin + i;
    if (t == DataType::kBool) {
      buf[i] = static_cast<char>(ref.mine_bool[k]);
    } else {
      PutInt(buf.data() + i * es, t, op == ReduceOp::kProduct ? ref.mine_prod[k] : ref.mine_sum[k]);
    }
  }
  return buf;
}

// The expected result for elements [begin, begin + n).
inline std::vector<char> Expected(const Reference& ref, size_t begin, size_t n, DataType t,
                                  ReduceOp op, int size) {
  const size_t es = DataTypeSize(t);
  std::vector<char> buf(n * es);
  for (size_t i = 0; i < n; ++i) {
    const size_t k = begin + i;
    char* p = buf.data() + i * es;
    if (t == DataType::kBool) {
      // Always 0 or 1, one rank included (its bytes are normalized, as the C ABI promises).
      *p = static_cast<char>(IsAnd(op) ? ref.all[k] : ref.any[k]);
      continue;
    }
    switch (op) {
      case ReduceOp::kSum:
        PutInt(p, t, ref.sum[k]);
        break;
      case ReduceOp::kAverage:
        PutAverage(p, t, ref.sum[k], size);
        break;
      case ReduceOp::kProduct:
        PutInt(p, t, ref.prod[k]);
        break;
      case ReduceOp::kMin:
        PutInt(p, t, t == DataType::kUInt8 ? ref.umin[k] : ref.smin[k]);
        break;
      case ReduceOp::kMax:
        PutInt(p, t, t == DataType::kUInt8 ? ref.umax[k] : ref.smax[k]);
        break;
      case ReduceOp::kAdasum:  // not element-wise, not in kAllOps (adasum_test.cc)
        break;
    }
  }
  return buf;
}

// Appends up to kMaxReported lines naming the first differing elements.
inline void Compare(const std::string& what, const std::vector<char>& got,
                    const std::vector<char>& want, DataType t, size_t index_base,
                    std::string* report, int* reported) {
  if (got == want) return;
  const size_t es = DataTypeSize(t);
  for (size_t i = 0; i * es < want.size() && *reported < kMaxReported; ++i) {
    if (std::memcmp(got.data() + i * es, want.data() + i * es, es) != 0) {
      *report += what + " index " + std::to_string(index_base + i) + ": expected " +
                 Show(want.data() + i * es, t) + ", got " + Show(got.data() + i * es, t) + "\n";
      ++*reported;
    }
  }
}

inline Status Done(const std::string& report) {
  return report.empty() ? Status::OK() : Internal("mismatches:\n" + report);
}

}  // namespace hvd::runtime::collectives::test
