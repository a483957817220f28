// Tensor fusion with large tensors reduced where they lie (core/executor_in_place.cc) through the
// public API: every rank's fused results bit-identical to unfused ones, in place and out of place
// (two tensors reading one input), with an average, a prescale and a postscale, with a joined
// rank; one collective for a whole group where rings run it (flat, hierarchical), and each large
// tensor alone with the same results where they do not (the direct path).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "core/context.h"
#include "runtime_env.h"
#include "testutil/multiproc.h"

namespace hvd {
namespace {

using testing::Check;
using testing::InitRank;
using testing::RunRanks;

constexpr int kTensors = 14;  // the last two read one input
constexpr int kSteps = 3;

struct Scenario {
  int ranks = 3;
  int hosts = 3;         // one rank per host: the flat ring over TCP
  bool grouped = false;  // one grouped allreduce a step, else an AllreduceAsync per tensor
  bool join = false;     // in the last step the last rank joins instead of submitting
  // 1: out-of-place inputs are read by the collective itself; else copied and scaled first.
  double prescale = 1.0;
  // > 0: the direct path takes a whole batch on one host (not the ring: each item alone).
  int64_t direct_max = 0;
  int64_t direct_max_tcp = 0;  // > 0: across hosts too
};

// One rank's steps; its results of every step into `out`, and the allreduce collectives of the
// steps after the first into `collectives`.
Status Steps(int rank, int size, const Scenario& sc, std::vector<float>* out,
             uint64_t* collectives) {
  AllreduceOptions o;
  o.op = ReduceOp::kAverage;
  o.prescale = sc.prescale;
  o.postscale = 3.0;
  std::vector<std::vector<float>> in(kTensors), res(kTensors);
  uint64_t before = 0;
  for (int step = 0; step < kSteps; ++step) {
    if (step == 1) before = runtime::core::CurrentEngineStats().allreduce_collectives;
    if (sc.join && step == kSteps - 1 && rank == size - 1) break;
    std::vector<Tensor> ins, outs;
    for (int t = 0; t < kTensors; ++t) {
      // 4000, 4148, 4296... bytes: above HVD_FUSION_MAX_TENSOR_BYTES=4200 from the third on.
      in[t].resize(t < kTensors - 2 ? 1000 + 37 * t : 2000);
      for (size_t k = 0; k < in[t].size(); ++k) {  // sums that depend on the order
        in[t][k] = 0.1f * (rank + 1) + 1e-7f * static_cast<float>(k * (t + 1)) + 1.0f / (step + 3);
      }
      // Even ones out of place, and the last two from the same input into outputs of their own.
      const bool apart = t % 2 == 0 || t >= kTensors - 2;
      res[t].assign(in[t].size(), -1.0f);
      float* src = t == kTensors - 1 ? in[kTensors - 2].data() : in[t].data();
      ins.push_back(MakeTensor(src, DataType::kFloat32, in[t].size()));
      outs.push_back(MakeTensor(apart ? res[t].data() : src, DataType::kFloat32, in[t].size()));
    }
    if (sc.grouped) {
      HVD_RETURN_IF_ERROR(GroupedAllreduce("grads", ins, outs, o));
    } else {
      std::vector<Handle> hs;
      for (int t = 0; t < kTensors; ++t) {
        hs.push_back(AllreduceAsync("grad." + std::to_string(t), ins[t], outs[t], o));
      }
      for (Handle& h : hs) HVD_RETURN_IF_ERROR(h.Wait());
    }
    for (int t = 0; t < kTensors; ++t) {
      const float* r = static_cast<const float*>(outs[t].data);
      out->insert(out->end(), r, r + in[t].size());
    }
  }
  *collectives = runtime::core::CurrentEngineStats().allreduce_collectives - before;
  if (sc.join) HVD_RETURN_IF_ERROR(Join());
  return Status::OK();
}

struct Results {
  std::vector<std::vector<float>> by_rank;  // empty when a rank failed
  uint64_t collectives = 0;                 // rank 0's
};

// Every rank's results of `sc` with the fusion threshold `fusion`, and rank 0's collectives.
Results Run(const Scenario& sc, const std::string& fusion) {
  const std::string file = ::testing::TempDir() + "/hvd_in_place_" + std::to_string(getpid());
  auto res = RunRanks(sc.ranks, [&](int rank, int size, const std::string& dir) -> Status {
    HVD_RETURN_IF_ERROR(
        InitRank(rank, size, dir,
                 {{"HVD_HOSTNAME", testing::SplitHosts(size, sc.hosts)[rank]},
                  {"HVD_ADVERTISE_ADDR", "127.0.0.1"},
                  {"HVD_FUSION_THRESHOLD", fusion},
                  {"HVD_FUSION_MAX_TENSOR_BYTES", "4200"},
                  {"HVD_DIRECT_ALLREDUCE_MAX_BYTES_TCP", std::to_string(sc.direct_max_tcp)},
                  {"HVD_DIRECT_ALLREDUCE_MAX_BYTES_SHM", std::to_string(sc.direct_max)}}));
    std::vector<float> out;
    uint64_t n = 0;
    HVD_RETURN_IF_ERROR(Steps(rank, size, sc, &out, &n));
    HVD_RETURN_IF_ERROR(Shutdown());
    const std::string mine = file + "_" + std::to_string(rank);
    FILE* f = std::fopen(mine.c_str(), "wb");
    HVD_RETURN_IF_ERROR(Check(f != nullptr, "cannot write " + mine));
    std::fwrite(&n, sizeof n, 1, f);
    std::fwrite(out.data(), sizeof(float), out.size(), f);
    std::fclose(f);
    return Status::OK();
  });
  EXPECT_TRUE(res.ok()) << res.FailureMessage();
  Results r;
  for (int rank = 0; rank < sc.ranks; ++rank) {
    const std::string mine = file + "_" + std::to_string(rank);
    std::vector<float> v;
    FILE* f = std::fopen(mine.c_str(), "rb");
    if (f == nullptr) return {};
    uint64_t n = 0;
    if (std::fread(&n, sizeof n, 1, f) == 1) {
      float x;
      while (std::fread(&x, sizeof x, 1, f) == 1) v.push_back(x);
    }
    std::fclose(f);
    std::remove(mine.c_str());
    if (rank == 0) r.collectives = n;
    r.by_rank.push_back(std::move(v));
  }
  return r;
}

// Runs `sc` fused and unfused and expects every rank's results bit-identical; returns rank 0's
// collectives of the fused run.
uint64_t ExpectFusedEqualsUnfused(const Scenario& sc) {
  const Results fused = Run(sc, "134217728");
  const Results unfused = Run(sc, "0");
  EXPECT_EQ(fused.by_rank.size(), static_cast<size_t>(sc.ranks));
  EXPECT_EQ(unfused.by_rank.size(), static_cast<size_t>(sc.ranks));
  for (size_t r = 0; r < fused.by_rank.size() && r < unfused.by_rank.size(); ++r) {
    const std::vector<float>& a = fused.by_rank[r];
    const std::vector<float>& b = unfused.by_rank[r];
    EXPECT_FALSE(a.empty()) << "rank " << r;
    EXPECT_EQ(a.size(), b.size()) << "rank " << r;
    if (a.size() == b.size()) {
      EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)))
          << "rank " << r << ": fused and unfused allreduce differ";
    }
  }
  EXPECT_EQ(unfused.collectives, uint64_t{kTensors} * (kSteps - 1));
  return fused.collectives;
}

// A group is one batch: one ring a step where the ring runs; else the 2 small tensors fused and
// the 12 large ones alone (13 a step).
constexpr uint64_t kRingOnly = kSteps - 1;
constexpr uint64_t kEachAlone = uint64_t{13} * (kSteps - 1);

TEST(FusionInPlace, OneCollectiveForAGroupAcrossHostsBitIdenticalToUnfused) {
  EXPECT_EQ(ExpectFusedEqualsUnfused({3, 3, true, false, 1.0}), kRingOnly);
  EXPECT_EQ(ExpectFusedEqualsUnfused({3, 3, true, false, 0.5}), kRingOnly);
  EXPECT_EQ(ExpectFusedEqualsUnfused({3, 3, true, true, 1.0}), kRingOnly);  // a joined rank
}

TEST(FusionInPlace, SeparateTensorsAndAJoinedRankAcrossHosts) {
  ExpectFusedEqualsUnfused({3, 3, false, true, 0.5});
  ExpectFusedEqualsUnfused({3, 3, false, false, 1.0});
}

// The hierarchical allreduce's rings (2 hosts of 2 ranks) and the ring on one host (the batch
// below the single copy's size) take the batch too; the direct path does not, and there each
// large tensor runs alone.
TEST(FusionInPlace, HierarchicalAndOneHostAndWhereNoRingRuns) {
  EXPECT_EQ(ExpectFusedEqualsUnfused({4, 2, true, false, 1.0}), kRingOnly);
  EXPECT_EQ(ExpectFusedEqualsUnfused({4, 2, true, true, 0.5}), kRingOnly);
  // The cross step direct for one local rank's segment (36872 bytes: the limit) and the ring for
  // the other's; then both paths direct: the hierarchical allreduce's small path, each alone.
  EXPECT_EQ(ExpectFusedEqualsUnfused({4, 2, true, false, 0.5, 0, 36872}), kRingOnly);
  EXPECT_EQ(ExpectFusedEqualsUnfused({4, 2, true, false, 1.0, 1 << 20, 1 << 20}), kEachAlone);
  EXPECT_EQ(ExpectFusedEqualsUnfused({3, 1, true, false, 1.0}), kRingOnly);
  EXPECT_EQ(ExpectFusedEqualsUnfused({3, 1, true, true, 0.5, 1 << 20}), kEachAlone);
}

}  // namespace
}  // namespace hvd
