// Device::BatchedCopy (runtime/gpu/cuda/batched_copy.cu) against the host's collectives::Scale:
// every dtype, odd sizes, aligned and misaligned pointers, scales 1, 0.5 and 3, many segments in
// one launch, in place; every byte around the segments must stay untouched.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "collectives/reduce.h"
#include "gpu/gpu_test_util.h"

namespace hvd::runtime::gpu::testing {
namespace {

constexpr DataType kAllTypes[] = {DataType::kFloat32,  DataType::kFloat64, DataType::kFloat16,
                                  DataType::kBFloat16, DataType::kInt8,    DataType::kUInt8,
                                  DataType::kInt16,    DataType::kInt32,   DataType::kInt64,
                                  DataType::kBool};
constexpr size_t kSizes[] = {0, 1, 3, 1023, 1025, (size_t{1} << 20) + 7};
constexpr uint8_t kFill = 0xA5;  // the destination's bytes outside every segment
constexpr size_t kGuard = 64;    // bytes between regions

// Valid values of `dtype` (finite floats; integers over their whole range, so that scaling by 3
// saturates and by 0.5 makes ties) as bytes.
std::vector<char> RandomValues(DataType dtype, size_t count, std::mt19937_64& rng) {
  const size_t elem = DataTypeSize(dtype);
  std::vector<char> out(count * elem);
  std::uniform_real_distribution<float> real(-100.0f, 100.0f);
  for (size_t i = 0; i < count; ++i) {
    char* p = out.data() + i * elem;
    const uint64_t bits = rng();
    switch (dtype) {
      case DataType::kFloat32: {
        const float v = real(rng);
        std::memcpy(p, &v, 4);
        break;
      }
      case DataType::kFloat64: {
        const double v = real(rng) * 1.000001;
        std::memcpy(p, &v, 8);
        break;
      }
      case DataType::kFloat16: {
        const uint16_t v = collectives::FloatToHalf(real(rng));
        std::memcpy(p, &v, 2);
        break;
      }
      case DataType::kBFloat16: {
        const uint16_t v = collectives::FloatToBFloat16(real(rng));
        std::memcpy(p, &v, 2);
        break;
      }
      case DataType::kBool:
        *p = static_cast<char>(bits & 1);
        break;
      default:  // integers: any bit pattern is a value
        std::memcpy(p, &bits, elem);
        break;
    }
  }
  return out;
}

// One segment of a test: `count` elements at byte offsets (from a 256-aligned base) of the source
// and destination.
struct Case {
  size_t count;
  size_t src_off;
  size_t dst_off;
};

class BatchedCopyTest : public GpuTest {
 protected:
  // Lays `cases` out in separate regions of a source and a destination arena, runs ONE
  // BatchedCopy over all of them (src == dst when `in_place`), and compares every destination
  // byte with the host's result.
  void RunAndCheck(DataType dtype, double scale, const std::vector<Case>& cases,
                   bool in_place = false) {
    SCOPED_TRACE(std::string(DataTypeName(dtype)) + " scale " + std::to_string(scale) +
                 (in_place ? " in place" : ""));
    const size_t elem = DataTypeSize(dtype);
    std::vector<size_t> src_at, dst_at;
    size_t src_bytes = 0, dst_bytes = 0;
    for (const Case& c : cases) {
      src_at.push_back((src_bytes + 255) / 256 * 256 + c.src_off);
      src_bytes = src_at.back() + c.count * elem + kGuard;
      dst_at.push_back((dst_bytes + 255) / 256 * 256 + c.dst_off);
      dst_bytes = dst_at.back() + c.count * elem + kGuard;
    }
    if (in_place) dst_at = src_at, dst_bytes = src_bytes;
    std::mt19937_64 rng(static_cast<uint64_t>(dtype) * 1000 + static_cast<uint64_t>(scale * 8));
    std::vector<char> host_src(src_bytes, static_cast<char>(0x5A));
    std::vector<char> expected(dst_bytes, static_cast<char>(kFill));
    if (in_place) expected = host_src;
    for (size_t i = 0; i < cases.size(); ++i) {
      const std::vector<char> v = RandomValues(dtype, cases[i].count, rng);
      std::memcpy(host_src.data() + src_at[i], v.data(), v.size());
      std::memcpy(expected.data() + dst_at[i], v.data(), v.size());
      if (scale != 1.0)
        collectives::Scale(expected.data() + dst_at[i], cases[i].count, dtype, scale);
    }
    DeviceMemory src(src_bytes), dst(dst_bytes);
    ASSERT_NE(src.get(), nullptr);
    ASSERT_NE(dst.get(), nullptr);
    char* dst_base = in_place ? src.get() : dst.get();
    HVD_CUDA_OK(cudaMemcpy(src.get(), host_src.data(), src_bytes, cudaMemcpyHostToDevice));
    HVD_CUDA_OK(cudaDeviceSynchronize());  // ordered before hvd's own stream
    if (!in_place) HVD_CUDA_OK(cudaMemset(dst.get(), kFill, dst_bytes));
    HVD_CUDA_OK(cudaDeviceSynchronize());  // ordered before hvd's own stream
    std::vector<Segment> segs;
    for (size_t i = 0; i < cases.size(); ++i) {
      segs.push_back({src.get() + src_at[i], dst_base + dst_at[i], cases[i].count});
    }
    const Status s = device_->BatchedCopy(segs.data(), segs.size(), dtype, scale);
    ASSERT_TRUE(s.ok()) << s.ToString();
    ASSERT_TRUE(device_->Synchronize().ok());
    std::vector<char> got(dst_bytes);
    HVD_CUDA_OK(cudaMemcpy(got.data(), dst_base, dst_bytes, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < cases.size(); ++i) {
      SCOPED_TRACE("segment " + std::to_string(i) + ": " + std::to_string(cases[i].count) +
                   " elements, src +" + std::to_string(cases[i].src_off) + ", dst +" +
                   std::to_string(cases[i].dst_off));
      // Before this segment (from the previous one's end) and the segment itself.
      const size_t from = i == 0 ? 0 : dst_at[i - 1] + cases[i - 1].count * elem;
      const size_t to = dst_at[i] + cases[i].count * elem;
      for (size_t b = from; b < to; ++b) {
        if (got[b] != expected[b]) {
          const bool inside = b >= dst_at[i];
          FAIL() << "byte " << b << (inside ? " (element " : " (before the segment")
                 << (inside ? std::to_string((b - dst_at[i]) / elem) + ")" : ")") << ": got "
                 << int(uint8_t(got[b])) << ", want " << int(uint8_t(expected[b]));
        }
      }
    }
    const size_t last = dst_at.back() + cases.back().count * elem;
    for (size_t b = last; b < dst_bytes; ++b) {
      ASSERT_EQ(got[b], expected[b]) << "byte " << b << " after the last segment was written";
    }
  }
};

TEST_F(BatchedCopyTest, EveryDtypeOddSizesAlignedAndMisalignedOneLaunch) {
  for (DataType dtype : kAllTypes) {
    for (double scale : {1.0, 0.5, 3.0}) {
      if (dtype == DataType::kBool && scale != 1.0) continue;
      const size_t e = DataTypeSize(dtype);
      std::vector<Case> cases;
      for (size_t n : kSizes) {
        cases.push_back({n, 0, 0});                    // both 16-byte aligned: vectors
        cases.push_back({n, e, e});                    // same misalignment: a head, then vectors
        cases.push_back({n, e, 3 * e});                // different misalignment: narrower units
        if (scale == 1.0) cases.push_back({n, 1, 6});  // bytes off any element boundary
      }
      RunAndCheck(dtype, scale, cases);
      if (HasFatalFailure()) return;
    }
  }
}

TEST_F(BatchedCopyTest, InPlace) {
  for (DataType dtype : {DataType::kFloat32, DataType::kFloat16, DataType::kInt32, DataType::kInt64,
                         DataType::kBFloat16}) {
    const size_t e = DataTypeSize(dtype);
    std::vector<Case> cases;
    for (size_t n : kSizes) cases.push_back({n, e, e});
    RunAndCheck(dtype, 0.5, cases, /*in_place=*/true);
    RunAndCheck(dtype, 3.0, cases, /*in_place=*/true);
    if (HasFatalFailure()) return;
  }
}

TEST_F(BatchedCopyTest, ThousandsOfSegmentsOneLaunch) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<size_t> size(0, 3000), off(0, 7);
  std::vector<Case> cases;
  for (int i = 0; i < 3000; ++i) cases.push_back({size(rng), off(rng) * 4, off(rng) * 4});
  RunAndCheck(DataType::kFloat32, 0.5, cases);
  RunAndCheck(DataType::kFloat32, 1.0, cases);
  RunAndCheck(DataType::kInt8, 3.0, cases);
}

// Pack into the fusion buffer (Buffer slot 0) and unpack back: the executor's round trip.
TEST_F(BatchedCopyTest, PackUnpackRoundTripThroughTheFusionBuffer) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<size_t> size(1, 5000);
  std::vector<size_t> counts(161);
  size_t total = 0;
  for (size_t& c : counts) total += (c = size(rng));
  std::vector<float> host(total);
  for (size_t i = 0; i < total; ++i) host[i] = static_cast<float>(i % 977) - 400.0f;
  DeviceMemory grads(total * 4), back(total * 4);
  HVD_CUDA_OK(cudaMemcpy(grads.get(), host.data(), total * 4, cudaMemcpyHostToDevice));
  HVD_CUDA_OK(cudaDeviceSynchronize());  // ordered before hvd's own stream
  void* fusion = nullptr;
  ASSERT_TRUE(device_->Buffer(0, total * 4, &fusion).ok());
  std::vector<Segment> pack, unpack;
  size_t at = 0;
  for (size_t c : counts) {
    pack.push_back({grads.get() + at * 4, static_cast<char*>(fusion) + at * 4, c});
    unpack.push_back({static_cast<char*>(fusion) + at * 4, back.get() + at * 4, c});
    at += c;
  }
  ASSERT_TRUE(device_->BatchedCopy(pack.data(), pack.size(), DataType::kFloat32, 0.5).ok());
  ASSERT_TRUE(device_->BatchedCopy(unpack.data(), unpack.size(), DataType::kFloat32, 2.0).ok());
  ASSERT_TRUE(device_->Synchronize().ok());
  std::vector<float> got(total);
  HVD_CUDA_OK(cudaMemcpy(got.data(), back.get(), total * 4, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < total; ++i) ASSERT_EQ(got[i], host[i]) << "element " << i;
}

// Ties, signs, saturation, NaN and infinite factors: the same integers as the host's Scale.
TEST_F(BatchedCopyTest, IntegerRoundingAndSaturationMatchTheHost) {
  const std::vector<int64_t> values = {0,
                                       1,
                                       -1,
                                       2,
                                       -2,
                                       3,
                                       -3,
                                       5,
                                       -5,
                                       7,
                                       -7,
                                       101,
                                       -101,
                                       127,
                                       -128,
                                       255,
                                       32767,
                                       -32768,
                                       2147483647,
                                       -2147483647 - 1,
                                       (int64_t{1} << 53) + 1,
                                       -(int64_t{1} << 53) - 3,
                                       std::numeric_limits<int64_t>::max(),
                                       std::numeric_limits<int64_t>::min()};
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  for (DataType dtype :
       {DataType::kInt8, DataType::kUInt8, DataType::kInt16, DataType::kInt32, DataType::kInt64}) {
    const size_t e = DataTypeSize(dtype);
    std::vector<char> bytes(values.size() * e);
    for (size_t i = 0; i < values.size(); ++i) std::memcpy(&bytes[i * e], &values[i], e);
    for (double scale :
         {0.5, -0.5, 1.5, 2.5, 3.0, 1e-3, 1e30, -1e30, 0.0, nan, inf, 1.0 / 3, 1.0 / 6, 1.0 / 49}) {
      SCOPED_TRACE(std::string(DataTypeName(dtype)) + " x " + std::to_string(scale));
      std::vector<char> want = bytes;
      collectives::Scale(want.data(), values.size(), dtype, scale);
      DeviceMemory buf(bytes.size());
      HVD_CUDA_OK(cudaMemcpy(buf.get(), bytes.data(), bytes.size(), cudaMemcpyHostToDevice));
      HVD_CUDA_OK(cudaDeviceSynchronize());  // ordered before hvd's own stream
      Segment s{buf.get(), buf.get(), values.size()};
      ASSERT_TRUE(device_->BatchedCopy(&s, 1, dtype, scale).ok());
      ASSERT_TRUE(device_->Synchronize().ok());
      std::vector<char> got(bytes.size());
      HVD_CUDA_OK(cudaMemcpy(got.data(), buf.get(), got.size(), cudaMemcpyDeviceToHost));
      for (size_t i = 0; i < values.size(); ++i) {
        int64_t g = 0, w = 0;
        std::memcpy(&g, &got[i * e], e);
        std::memcpy(&w, &want[i * e], e);
        EXPECT_EQ(g, w) << "value " << values[i] << " (as " << DataTypeName(dtype) << ")";
      }
    }
  }
}

TEST_F(BatchedCopyTest, RefusesScaledBoolAndMisalignedScaledElements) {
  DeviceMemory buf(64);
  Segment s{buf.get(), buf.get() + 32, 4};
  Status st = device_->BatchedCopy(&s, 1, DataType::kBool, 0.5);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("bool"), std::string::npos) << st.message();
  Segment odd{buf.get() + 1, buf.get() + 32, 4};
  st = device_->BatchedCopy(&odd, 1, DataType::kFloat32, 0.5);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("aligned"), std::string::npos) << st.message();
  // Nothing to do is not an error: no segment, or only empty ones.
  EXPECT_TRUE(device_->BatchedCopy(nullptr, 0, DataType::kFloat32, 0.5).ok());
  Segment empty{nullptr, nullptr, 0};
  EXPECT_TRUE(device_->BatchedCopy(&empty, 1, DataType::kFloat32, 0.5).ok());
}

// Where no GPU can be used, the backend says why, and the reason is the probe's.
TEST(GpuBackendLoad, SaysWhyWithoutAGpu) {
  GpuBackend* backend = nullptr;
  const Status s = LoadBackend(&backend);
  if (s.ok()) GTEST_SKIP() << "a GPU is usable here: " << backend->Describe();
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  EXPECT_EQ(s.message().rfind("no GPU: ", 0), 0u) << s.message();
  EXPECT_EQ(backend, nullptr);
}

}  // namespace
}  // namespace hvd::runtime::gpu::testing
