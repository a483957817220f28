// Allgather, broadcast, alltoall, reducescatter, barrier, join and local gradient aggregation
// through the public API, with every rank its own process.
#include <gtest/gtest.h>

#include <numeric>

#include "runtime_env.h"
#include "testutil/multiproc.h"

namespace hvd {
namespace {

using testing::Check;
using testing::ExpectEqual;
using testing::InitRank;
using testing::RunRanks;

class OpsApi : public ::testing::TestWithParam<int> {};

TEST_P(OpsApi, AllgatherWithDifferentFirstDimensions) {
  auto res = RunRanks(GetParam(), [](int rank, int size, const std::string& dir) -> Status {
    HVD_RETURN_IF_ERROR(InitRank(rank, size, dir));
    for (int step = 0; step < 3; ++step) {  // repeated: the cached path must agree too
      const int rows = (rank + step) % 3;   // 0 rows for some ranks
      std::vector<int32_t> mine(rows * 2);
      for (int i = 0; i < rows * 2; ++i) mine[i] = rank * 100 + i;
      Handle h = AllgatherAsync("gather", Tensor{mine.data(), DataType::kInt32, {rows, 2}});
      HVD_RETURN_IF_ERROR(h.Wait());
      std::vector<int32_t> want;
      for (int r = 0; r < size; ++r) {
        for (int i = 0; i < ((r + step) % 3) * 2; ++i) want.push_back(r * 100 + i);
      }
      const int32_t* got = static_cast<const int32_t*>(h.output_data());
      HVD_RETURN_IF_ERROR(
          ExpectEqual("allgather step " + std::to_string(step),
                      std::vector<int32_t>(got, got + h.output_bytes() / sizeof(int32_t)), want));
      HVD_RETURN_IF_ERROR(
          Check(h.output_shape() == std::vector<int64_t>{static_cast<int64_t>(want.size() / 2), 2},
                "allgather output shape"));
    }
    return Shutdown();
  });
  HVD_EXPECT_RANKS_OK(res);
}

TEST_P(OpsApi, BroadcastFromEveryRoot) {
  auto res = RunRanks(GetParam(), [](int rank, int size, const std::string& dir) -> Status {
    HVD_RETURN_IF_ERROR(InitRank(rank, size, dir));
    for (int root = 0; root < size; ++root) {
      std::vector<double> v(1001, rank == root ? 3.5 + root : -1.0);
      HVD_RETURN_IF_ERROR(
          Broadcast("weights", MakeTensor(v.data(), DataType::kFloat64, v.size()), root));
      HVD_RETURN_IF_ERROR(ExpectEqual("broadcast from " + std::to_string(root), v,
                                      std::vector<double>(1001, 3.5 + root)));
    }
    return Shutdown();
  });
  HVD_EXPECT_RANKS_OK(res);
}

TEST_P(OpsApi, AlltoallWithUnevenSplits) {
  auto res = RunRanks(GetParam(), [](int rank, int size, const std::string& dir) -> Status {
    HVD_RETURN_IF_ERROR(InitRank(rank, size, dir));
    // Rank r sends (r + p) % 3 rows to rank p; row values encode (sender, receiver, index).
    std::vector<int64_t> splits(size);
    std::vector<int64_t> data;
    for (int p = 0; p < size; ++p) {
      splits[p] = (rank + p) % 3;
      for (int i = 0; i < splits[p]; ++i) data.push_back(rank * 10000 + p * 100 + i);
    }
    Handle h = AlltoallAsync(
        "a2a", Tensor{data.data(), DataType::kInt64, {static_cast<int64_t>(data.size())}}, splits);
    HVD_RETURN_IF_ERROR(h.Wait());
    std::vector<int64_t> want, want_splits;
    for (int p = 0; p < size; ++p) {
      want_splits.push_back((p + rank) % 3);
      for (int i = 0; i < (p + rank) % 3; ++i) want.push_back(p * 10000 + rank * 100 + i);
    }
    const int64_t* got = static_cast<const int64_t*>(h.output_data());
    HVD_RETURN_IF_ERROR(
        ExpectEqual("alltoall", std::vector<int64_t>(got, got + h.output_bytes() / 8), want));
    HVD_RETURN_IF_ERROR(ExpectEqual("received splits", h.received_splits(), want_splits));
    return Shutdown();
  });
  HVD_EXPECT_RANKS_OK(res);
}

// As Horovod: splits may sum to less than the first dimension (the rest is not sent), not more.
TEST_P(OpsApi, AlltoallSendsOnlyTheRowsItsSplitsCover) {
  auto res = RunRanks(GetParam(), [](int rank, int size, const std::string& dir) -> Status {
    HVD_RETURN_IF_ERROR(InitRank(rank, size, dir));
    std::vector<int64_t> data(3 * size + 2);  // one row for each rank, then unsent ones
    for (size_t i = 0; i < data.size(); ++i) data[i] = rank * 1000 + static_cast<int64_t>(i);
    const Tensor in{data.data(), DataType::kInt64, {static_cast<int64_t>(data.size())}};
    Handle h = AlltoallAsync("a2a.part", in, std::vector<int64_t>(size, 1));
    HVD_RETURN_IF_ERROR(h.Wait());
    std::vector<int64_t> want;
    for (int p = 0; p < size; ++p) want.push_back(p * 1000 + rank);
    const int64_t* got = static_cast<const int64_t*>(h.output_data());
    HVD_RETURN_IF_ERROR(
        ExpectEqual("alltoall", std::vector<int64_t>(got, got + h.output_bytes() / 8), want));
    std::vector<int64_t> over(size, 0);
    over[0] = static_cast<int64_t>(data.size()) + 1;
    Status s = AlltoallAsync("a2a.over", in, over).Wait();
    if (s.code() != StatusCode::kInvalidArgument ||
        s.message().find("summing to at most the first dimension") == std::string::npos) {
      return Internal("splits past the first dimension: " + s.ToString());
    }
    return Shutdown();
  });
  HVD_EXPECT_RANKS_OK(res);
}

TEST_P(OpsApi, ReducescatterUnevenRows) {
  auto res = RunRanks(GetParam(), [](int rank, int size, const std::string& dir) -> Status {
    HVD_RETURN_IF_ERROR(InitRank(rank, size, dir));
    const int rows = 2 * size + 1;  // does not divide: low ranks get an extra row
    std::vector<float> in(rows * 3);
    for (int i = 0; i < rows * 3; ++i) in[i] = static_cast<float>(i + rank);
    AllreduceOptions o;
    o.op = ReduceOp::kSum;
    Handle h = ReducescatterAsync("rs", Tensor{in.data(), DataType::kFloat32, {rows, 3}}, o);
    HVD_RETURN_IF_ERROR(h.Wait());
    int first = 0;
    for (int r = 0; r < rank; ++r) first += rows / size + (r < rows % size ? 1 : 0);
    const int mine = rows / size + (rank < rows % size ? 1 : 0);
    std::vector<float> want;
    for (int i = first * 3; i < (first + mine) * 3; ++i) {
      want.push_back(static_cast<float>(size * i + size * (size - 1) / 2));
    }
    const float* got = static_cast<const float*>(h.output_data());
    HVD_RETURN_IF_ERROR(
        ExpectEqual("reducescatter", std::vector<float>(got, got + h.output_bytes() / 4), want));
    HVD_RETURN_IF_ERROR(Check(h.output_shape() == std::vector<int64_t>{mine, 3}, "output shape"));
    return Shutdown();
  });
  HVD_EXPECT_RANKS_OK(res);
}

TEST_P(OpsApi, BarrierAndJoin) {
  auto res = RunRanks(GetParam(), [](int rank, int size, const std::string& dir) -> Status {
    HVD_RETURN_IF_ERROR(InitRank(rank, size, dir));
    HVD_RETURN_IF_ERROR(Barrier());
    // Rank r has r + 1 batches of data; ranks that run out join and contribute nothing.
    for (int step = 0; step <= rank; ++step) {
      std::vector<float> g(64, 1.0f);
      AllreduceOptions o;  // average over the ranks still training
      HVD_RETURN_IF_ERROR(Allreduce("grad", MakeTensor(g.data(), DataType::kFloat32, 64),
                                    MakeTensor(g.data(), DataType::kFloat32, 64), o));
      HVD_RETURN_IF_ERROR(ExpectEqual("averaged grad at step " + std::to_string(step), g,
                                      std::vector<float>(64, 1.0f)));
      std::vector<int32_t> c(5, 1);
      HVD_RETURN_IF_ERROR(Allreduce("count", MakeTensor(c.data(), DataType::kInt32, 5),
                                    MakeTensor(c.data(), DataType::kInt32, 5), testing::Sum()));
      HVD_RETURN_IF_ERROR(ExpectEqual("ranks still training at step " + std::to_string(step), c,
                                      std::vector<int32_t>(5, size - step)));
    }
    int last = -1;
    HVD_RETURN_IF_ERROR(Join(&last));
    HVD_RETURN_IF_ERROR(Check(last == size - 1, "last joined rank " + std::to_string(last) +
                                                    ", want " + std::to_string(size - 1)));
    HVD_RETURN_IF_ERROR(Barrier());
    return Shutdown();
  });
  HVD_EXPECT_RANKS_OK(res);
}

INSTANTIATE_TEST_SUITE_P(Ranks, OpsApi, ::testing::Values(1, 2, 3, 5),
                         [](const auto& info) { return std::to_string(info.param) + "ranks"; });

TEST(LocalGradientAggregator, AllreducesOncePerNPasses) {
  auto res = RunRanks(2, [](int rank, int size, const std::string& dir) -> Status {
    HVD_RETURN_IF_ERROR(InitRank(rank, size, dir));
    LocalGradientAggregator agg(3);
    for (int step = 0; step < 2; ++step) {
      std::vector<float> g(10);
      Handle h;
      for (int pass = 0; pass < 3; ++pass) {
        std::fill(g.begin(), g.end(), static_cast<float>(rank * 3 + pass + 1));
        h = agg.Add("w", MakeTensor(g.data(), DataType::kFloat32, 10));
        HVD_RETURN_IF_ERROR(Check(h.valid() == (pass == 2), "handle valid only on the last pass"));
      }
      HVD_RETURN_IF_ERROR(h.Wait());
      // mean over ranks and passes of rank*3 + pass + 1 = (1+2+3 + 4+5+6) / 6
      HVD_RETURN_IF_ERROR(ExpectEqual("aggregated", g, std::vector<float>(10, 3.5f)));
    }
    std::vector<float> other(4);
    Handle bad = agg.Add("w", MakeTensor(other.data(), DataType::kFloat32, 4));
    HVD_RETURN_IF_ERROR(Check(bad.Ready() && bad.Wait().code() == StatusCode::kInvalidArgument,
                              "a shape change must fail"));
    return Shutdown();
  });
  HVD_EXPECT_RANKS_OK(res);
}

TEST(Topology, LocalAndCrossRanksFromHostNames) {
  auto res = RunRanks(5, [](int rank, int size, const std::string& dir) -> Status {
    // Hosts: a a b b b (ranks 0-1 on a, 2-4 on b).
    const char* host = rank < 2 ? "host-a" : "host-b";
    HVD_RETURN_IF_ERROR(
        InitRank(rank, size, dir, {{"HVD_HOSTNAME", host}, {"HVD_ADVERTISE_ADDR", "127.0.0.1"}}));
    const int want_local[] = {0, 1, 0, 1, 2};
    const int want_local_size[] = {2, 2, 3, 3, 3};
    const int want_cross[] = {0, 0, 1, 1, 0};
    const int want_cross_size[] = {2, 2, 2, 2, 1};
    HVD_RETURN_IF_ERROR(Check(Rank() == rank && Size() == size, "rank/size"));
    HVD_RETURN_IF_ERROR(
        Check(LocalRank() == want_local[rank] && LocalSize() == want_local_size[rank] &&
                  CrossRank() == want_cross[rank] && CrossSize() == want_cross_size[rank],
              "topology of rank " + std::to_string(rank) + ": local " +
                  std::to_string(LocalRank()) + "/" + std::to_string(LocalSize()) + " cross " +
                  std::to_string(CrossRank()) + "/" + std::to_string(CrossSize())));
    std::vector<float> v(3, 1.0f);
    HVD_RETURN_IF_ERROR(Allreduce("t", MakeTensor(v.data(), DataType::kFloat32, 3),
                                  MakeTensor(v.data(), DataType::kFloat32, 3)));
    return Shutdown();
  });
  HVD_EXPECT_RANKS_OK(res);
}

}  // namespace
}  // namespace hvd
