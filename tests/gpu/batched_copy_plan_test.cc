// The batched copy kernel's plan and per-thread work (runtime/gpu/cuda/batched_copy_kernel.h),
// emulated on the host: every block and thread of the grid run one after the other over host
// memory. Needs no GPU, so the indexing (heads, 16/8/4/2/1-byte units, tails, block ranges, the
// segment search) and the integer rounding are checked on every machine, against the host's
// collectives::Scale. The device runs the same code (batched_copy_test.cc checks it there).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "collectives/reduce.h"
#include "gpu/cuda/batched_copy_kernel.h"
#include "hvd/types.h"

namespace hvd::runtime::gpu::cuda {
namespace {

struct Seg {
  size_t count;    // elements
  size_t src_off;  // bytes from a 256-aligned base
  size_t dst_off;
};

// A 256-byte aligned host buffer.
struct Arena {
  explicit Arena(size_t bytes) : size((bytes + 255) / 256 * 256 + 256) {
    p = static_cast<char*>(std::aligned_alloc(256, size));
  }
  ~Arena() { std::free(p); }
  char* p;
  size_t size;
};

// Runs the grid on the host: what BatchedCopier::Run plans and BatchedKernel does.
template <typename T, typename Op>
void Emulate(const std::vector<const void*>& src, const std::vector<void*>& dst,
             const std::vector<size_t>& count, size_t unit_elem, const Op& op) {
  std::vector<Entry> table;
  uint64_t blocks = 0;
  for (size_t i = 0; i < src.size(); ++i) {
    if (count[i] == 0) continue;
    Entry e{};
    blocks += PlanEntry(src[i], dst[i], count[i], unit_elem, blocks, &e);
    table.push_back(e);
  }
  const int n = static_cast<int>(table.size());
  for (uint64_t b = 0; b < blocks; ++b) {
    const int seg = SegmentOf(table.data(), n, b);
    const Entry& s = table[seg];
    ASSERT_GE(b, s.first_block);
    ASSERT_LT(b - s.first_block, BlocksOf(s));
    for (unsigned t = 0; t < static_cast<unsigned>(kThreads); ++t) {
      CopyThread<T>(s, b - s.first_block, t, op);
    }
  }
}

// Random bytes in, the plan emulated, every destination byte compared with the host's result.
template <typename T, typename Op>
void Check(DataType dtype, double scale, const Op& op, const std::vector<Seg>& segs) {
  SCOPED_TRACE(std::string(DataTypeName(dtype)) + " x " + std::to_string(scale));
  const size_t elem = DataTypeSize(dtype);
  const bool copy = scale == 1.0;
  std::vector<size_t> src_at, dst_at, counts;
  size_t src_bytes = 0, dst_bytes = 0;
  for (const Seg& s : segs) {
    src_at.push_back((src_bytes + 255) / 256 * 256 + s.src_off);
    src_bytes = src_at.back() + s.count * elem + 64;
    dst_at.push_back((dst_bytes + 255) / 256 * 256 + s.dst_off);
    dst_bytes = dst_at.back() + s.count * elem + 64;
    counts.push_back(copy ? s.count * elem : s.count);
  }
  Arena src(src_bytes), dst(dst_bytes);
  std::mt19937_64 rng(42);
  for (size_t i = 0; i < src_bytes; ++i) src.p[i] = static_cast<char>(rng());
  if (dtype == DataType::kFloat32 || dtype == DataType::kFloat64) {
    std::uniform_real_distribution<double> real(-1000, 1000);
    for (size_t i = 0; i < segs.size(); ++i) {
      for (size_t j = 0; j < segs[i].count; ++j) {
        const T v = static_cast<T>(real(rng));
        std::memcpy(src.p + src_at[i] + j * elem, &v, elem);
      }
    }
  }
  std::memset(dst.p, 0xA5, dst_bytes);
  std::vector<char> want(dst.p, dst.p + dst_bytes);
  std::vector<const void*> s_ptr;
  std::vector<void*> d_ptr;
  for (size_t i = 0; i < segs.size(); ++i) {
    std::memcpy(want.data() + dst_at[i], src.p + src_at[i], segs[i].count * elem);
    if (!copy) collectives::Scale(want.data() + dst_at[i], segs[i].count, dtype, scale);
    s_ptr.push_back(src.p + src_at[i]);
    d_ptr.push_back(dst.p + dst_at[i]);
  }
  Emulate<T>(s_ptr, d_ptr, counts, copy ? 1 : elem, op);
  for (size_t b = 0; b < dst_bytes; ++b) {
    if (dst.p[b] != want[b]) {
      FAIL() << "byte " << b << ": got " << int(uint8_t(dst.p[b])) << ", want "
             << int(uint8_t(want[b]));
    }
  }
}

std::vector<Seg> Cases(size_t elem, bool bytes_off) {
  std::vector<Seg> out;
  for (size_t n : {size_t{0}, size_t{1}, size_t{3}, size_t{15}, size_t{17}, size_t{1023},
                   size_t{1025}, kUnitsPerBlock * 16 / elem + 5, (size_t{1} << 18) + 7}) {
    for (size_t so : {size_t{0}, elem, 3 * elem, 8 * elem}) {
      for (size_t d : {size_t{0}, elem, 2 * elem, 5 * elem}) out.push_back({n, so, d});
    }
    if (bytes_off) out.push_back({n, 1, 6}), out.push_back({n, 3, 3}), out.push_back({n, 2, 6});
  }
  return out;
}

TEST(BatchedCopyPlan, UnitsFollowTheSharedAlignment) {
  EXPECT_EQ(UnitBytes(0x1000, 0x2000, 1), 16u);
  EXPECT_EQ(UnitBytes(0x1004, 0x2004, 4), 16u);  // same offset: a head, then 16-byte units
  EXPECT_EQ(UnitBytes(0x1008, 0x2000, 4), 8u);
  EXPECT_EQ(UnitBytes(0x1004, 0x2000, 4), 4u);
  EXPECT_EQ(UnitBytes(0x1001, 0x2000, 1), 1u);
  EXPECT_EQ(UnitBytes(0x1002, 0x2000, 1), 2u);
  EXPECT_EQ(UnitBytes(0x1008, 0x2000, 8), 8u);
  Entry e{};
  char* base = reinterpret_cast<char*>(0x10000);
  EXPECT_EQ(PlanEntry(base + 4, base + 0x1004, 1000, 4, 7, &e), 1u);
  EXPECT_EQ(e.head, 3u);  // 3 floats to reach 16-byte alignment
  EXPECT_EQ(e.unit_bytes, 16u);
  EXPECT_EQ(e.units, (1000u - 3u) / 4u);
  EXPECT_EQ(e.first_block, 7u);
  EXPECT_EQ(PlanEntry(base, base + 0x1000, kUnitsPerBlock * 4 * 3 + 1, 4, 0, &e), 3u);
  EXPECT_EQ(e.units, kUnitsPerBlock * 3);  // and one float of tail, done by the last block
}

TEST(BatchedCopyPlan, CopyPathEveryAlignmentOneGrid) {
  Check<uint8_t>(DataType::kFloat32, 1.0, CopyOp{}, Cases(4, /*bytes_off=*/true));
  Check<uint8_t>(DataType::kInt64, 1.0, CopyOp{}, Cases(8, true));
  Check<uint8_t>(DataType::kBool, 1.0, CopyOp{}, Cases(1, true));
}

TEST(BatchedCopyPlan, ScaledFloatsEveryAlignment) {
  Check<float>(DataType::kFloat32, 0.5, ScaleF32{0.5f}, Cases(4, false));
  Check<float>(DataType::kFloat32, 3.0, ScaleF32{3.0f}, Cases(4, false));
  Check<double>(DataType::kFloat64, 0.5, ScaleF64{0.5}, Cases(8, false));
}

// The kernel's integer functor for `f`, as batched_copy.cu builds it.
template <typename T>
ScaleInt<T> IntScale(double f) {
  return ScaleInt<T>{f, collectives::ExactDivisor(f)};
}

TEST(BatchedCopyPlan, ScaledIntegersMatchTheHostsRounding) {
  for (double f : {0.5, 3.0, -1.5, 1.0 / 3, 1.0 / 6}) {
    Check<int8_t>(DataType::kInt8, f, IntScale<int8_t>(f), Cases(1, false));
    Check<uint8_t>(DataType::kUInt8, f, IntScale<uint8_t>(f), Cases(1, false));
    Check<int16_t>(DataType::kInt16, f, IntScale<int16_t>(f), Cases(2, false));
    Check<int32_t>(DataType::kInt32, f, IntScale<int32_t>(f), Cases(4, false));
    Check<int64_t>(DataType::kInt64, f, IntScale<int64_t>(f), Cases(8, false));
    if (HasFatalFailure()) return;
  }
}

// Ties, saturation, NaN and infinite factors, one value at a time.
TEST(BatchedCopyPlan, IntegerEdgeCases) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  const int64_t big = std::numeric_limits<int64_t>::max(),
                small = std::numeric_limits<int64_t>::min();
  for (int64_t x : {int64_t{0}, int64_t{1}, int64_t{-1}, int64_t{3}, int64_t{-3}, int64_t{5},
                    int64_t{-5}, (int64_t{1} << 53) + 1, -(int64_t{1} << 53) - 3,
                    (int64_t{1} << 62) + 12345, big, small, big - 1, small + 1}) {
    for (double f : {0.5, -0.5, 1.5, 2.5, 3.0, 1e-3, 0.999999, 1e30, -1e30, 0.0, nan, inf, -inf,
                     1.0 / 3, 1.0 / 6, 1.0 / 49, -1.0 / 3}) {
      int64_t want = x;
      collectives::Scale(&want, 1, DataType::kInt64, f);
      EXPECT_EQ(IntScale<int64_t>(f)(x), want) << x << " x " << f;
      int32_t x32 = static_cast<int32_t>(x), want32 = x32;
      collectives::Scale(&want32, 1, DataType::kInt32, f);
      EXPECT_EQ(IntScale<int32_t>(f)(x32), want32) << x32 << " x " << f;
    }
  }
}

}  // namespace
}  // namespace hvd::runtime::gpu::cuda
