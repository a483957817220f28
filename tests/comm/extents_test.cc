// AllreduceExtents: the ring over a buffer that lies in several places (collectives.h, Extent)
// leaves every element as AllreduceParts leaves it in one buffer, bit for bit, whatever each
// rank's extents (the ranks cut the same virtual buffer differently), in place or out of place,
// with and without the look-ahead, over shared memory, TCP and both, flat and hierarchical, for 4-
// and 8-byte elements and every op; it never writes an input; and where rings do not run it
// refuses, naming the path that does.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "collectives/collectives.h"
#include "collectives_harness.h"
#include "testutil/mix.h"
#include "testutil/multiproc.h"

namespace hvd::runtime::collectives {
namespace {

using hvd::testing::Mix;
using hvd::testing::RunRanks;
using hvd::testing::RunResult;
using test::Config;
using test::Connect;
using test::MakeComm;
using test::Millis;
using transport::Transport;

// One rank's virtual buffer of `count` floats cut into extents at points drawn from `seed`:
// some empty, some in place (the data holds the input), some out of place (the data holds
// garbage, the input sits elsewhere).
template <typename T>
struct Cut {
  std::vector<Extent> extents;
  std::vector<std::unique_ptr<std::vector<T>>> data, inputs;
  std::vector<size_t> begin, end;  // each extent's elements [begin, end)
};

template <typename T>
Cut<T> CutUp(const std::vector<T>& v, uint64_t seed) {
  Cut<T> cut;
  size_t at = 0;
  for (uint64_t k = 0; at < v.size() || k == 0; ++k) {
    const uint64_t m = Mix(seed * 131 + k);
    // Mostly short extents (many fragments per chunk), some long ones, some empty.
    size_t len = m % 5 == 0 ? 0 : m % 3 == 0 ? 1 + m % 40000 : 1 + m % 700;
    len = std::min(len, v.size() - at);
    auto data = std::make_unique<std::vector<T>>(std::max<size_t>(len, 1), T(-7.5));
    Extent e{at, reinterpret_cast<char*>(data->data()), nullptr};
    if (m % 2 == 0) {
      std::copy(v.begin() + at, v.begin() + at + len, data->begin());
      cut.inputs.push_back(nullptr);
    } else {
      auto in = std::make_unique<std::vector<T>>(v.begin() + at, v.begin() + at + len);
      in->push_back(T(0));  // never empty
      e.in = reinterpret_cast<const char*>(in->data());
      cut.inputs.push_back(std::move(in));
    }
    cut.extents.push_back(e);
    cut.data.push_back(std::move(data));
    cut.begin.push_back(at);
    cut.end.push_back(at + len);
    at += len;
  }
  return cut;
}

template <typename T>
Status CheckType(const Comm& comm, const Config& c, int rank, int index, DataType dtype) {
  for (size_t count : {size_t{1}, size_t{7}, size_t{999}, size_t{100003}}) {
    for (ReduceOp op :
         {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kProduct}) {
      const std::string what = c.name + " dtype " + std::to_string(static_cast<int>(dtype)) +
                               " count " + std::to_string(count) + " op " +
                               std::to_string(static_cast<int>(op));
      std::vector<T> v(count);
      for (size_t i = 0; i < count; ++i) {  // order-dependent sums; products within range
        v[i] = static_cast<T>(Mix(i * 977 + rank) % 100000) * T(1e-3) + T(1) / T(rank + 3);
      }
      // The parts of a fused batch of three tensors, as the executor lays them out.
      std::vector<size_t> parts = AllreduceLayout(comm, count / 3);
      for (size_t c : {count / 5, count - count / 3 - count / 5}) {
        const std::vector<size_t> more = AllreduceLayout(comm, c);
        for (size_t s = 0; s < parts.size(); ++s) parts[s] += more[s];
      }
      if (!ExtentsTake(comm, count, dtype)) {  // the small buffers' path: refused, on every rank
        const Status s = AllreduceExtents(comm, {Extent{0, reinterpret_cast<char*>(v.data())}},
                                          parts, dtype, op);
        if (s.code() != StatusCode::kFailedPrecondition) {
          return Internal(what + ": want FailedPrecondition, got " + s.ToString());
        }
        continue;
      }
      std::vector<T> want = v;
      HVD_RETURN_IF_ERROR(AllreduceParts(comm, want.data(), parts, dtype, op, 0.5));
      Cut<T> cut = CutUp(v, count * 7 + static_cast<uint64_t>(rank) * 1000003 + index);
      HVD_RETURN_IF_ERROR(
          AllreduceExtents(comm, cut.extents, parts, dtype, op, 0.5).WithContext(what));
      for (size_t k = 0; k < cut.extents.size(); ++k) {
        const size_t len = cut.end[k] - cut.begin[k];
        if (len == 0) continue;
        if (std::memcmp(cut.data[k]->data(), want.data() + cut.begin[k], len * sizeof(T))) {
          return Internal(what + ": extent " + std::to_string(k) + " (elements " +
                          std::to_string(cut.begin[k]) + ".." + std::to_string(cut.end[k]) +
                          ") differs from AllreduceParts");
        }
        if (cut.inputs[k] != nullptr &&
            std::memcmp(cut.inputs[k]->data(), v.data() + cut.begin[k], len * sizeof(T))) {
          return Internal(what + ": extent " + std::to_string(k) + "'s input was written");
        }
      }
    }
  }
  return Status::OK();
}

Status CheckConfig(const Config& c, int rank, const std::string& dir, int index) {
  std::unique_ptr<Transport> t;
  HVD_RETURN_IF_ERROR(Connect(c, rank, dir, &t, "config" + std::to_string(index)));
  const Comm comm = MakeComm(c, t.get(), Millis(30000));
  HVD_RETURN_IF_ERROR(CheckType<float>(comm, c, rank, index, DataType::kFloat32));
  return CheckType<double>(comm, c, rank, index, DataType::kFloat64);
}

TEST(AllreduceExtents, MatchesOneBufferBitForBit) {
  const std::vector<Config> configs = {
      {"shm", 3, 1, true, 0, 4096},
      {"shm_ahead", 3, 1, true, 0, 4096, 0, 3},
      {"tcp", 2, 1, false, 0, 8192},
      {"tcp_ahead", 5, 1, false, 0, 8192, 0, 4},
      // Unequal hosts (2 + 1): flat, shared memory within the host and TCP across.
      {"mixed_ahead", 3, 2, true, 0, 4096, 0, 2},
      // Hierarchical: the rings within 2 hosts of 2 and 3 ranks, and the cross ring's slices;
      // with a direct size, the small buffers refused and the cross step direct (through a copy
      // of the slice) for the larger ones.
      {"hier", 4, 2, true, 0, 4096},
      {"hier_ahead", 6, 2, true, 0, 8192, 0, 3},
      {"hier_direct_cross", 4, 2, true, 256 << 10, 4096},
      {"hier3_direct_cross", 6, 2, true, 256 << 10, 8192, 0, 3},
      // Out-of-place extents written around the cache (stream_copy.h), the in-place ones not.
      {"shm_stream", 3, 1, true, 0, 4096, 0, 0, 1},
      {"hier_stream", 4, 2, true, 0, 4096, 0, 0, 1},
  };
  for (size_t i = 0; i < configs.size(); ++i) {
    const Config& c = configs[i];
    RunResult res = RunRanks(c.ranks, [&](int rank, int, const std::string& dir) {
      return CheckConfig(c, rank, dir, static_cast<int>(i));
    });
    HVD_EXPECT_RANKS_OK(res);
  }
}

TEST(AllreduceExtents, RefusesWhereNoRingRuns) {
  constexpr size_t kAlways = ~size_t{0};
  const Config c{"direct", 2, 1, true, kAlways};
  RunResult res = RunRanks(2, [&](int rank, int, const std::string& dir) -> Status {
    std::unique_ptr<Transport> t;
    HVD_RETURN_IF_ERROR(Connect(c, rank, dir, &t));
    const Comm comm = MakeComm(c, t.get(), Millis(30000));
    std::vector<float> v(100, 1.0f);
    const Status s =
        AllreduceExtents(comm, {Extent{0, reinterpret_cast<char*>(v.data())}},
                         AllreduceLayout(comm, v.size()), DataType::kFloat32, ReduceOp::kSum);
    if (s.code() != StatusCode::kFailedPrecondition ||
        s.message().find("direct path") == std::string::npos) {
      return Internal("want FailedPrecondition naming the direct path, got: " + s.ToString());
    }
    // Extents that leave a gap or hold elements without memory: InvalidArgument, on every rank.
    const Status gap = AllreduceExtents(comm, {Extent{5, reinterpret_cast<char*>(v.data())}},
                                        {0, 50, 100}, DataType::kFloat32, ReduceOp::kSum);
    const Status null = AllreduceExtents(comm, {Extent{0, nullptr}}, {0, 50, 100},
                                         DataType::kFloat32, ReduceOp::kSum);
    if (gap.code() != StatusCode::kInvalidArgument || null.code() != StatusCode::kInvalidArgument) {
      return Internal("want InvalidArgument, got: " + gap.ToString() + " / " + null.ToString());
    }
    return Status::OK();
  });
  HVD_EXPECT_RANKS_OK(res);
}

}  // namespace
}  // namespace hvd::runtime::collectives
