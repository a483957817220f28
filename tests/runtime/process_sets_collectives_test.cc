// Every collective on every dtype inside a process set and globally (with and without the
// response cache and fusion), and join and barrier per set; every rank its own process.
#include <gtest/gtest.h>

#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "core/context.h"
#include "core/engine.h"
#include "process_sets_harness.h"

namespace hvd {
namespace {

using testing::Check;
using testing::ExpectEqual;
using testing::InitRankWith;
using testing::sets::BarrierAndShutdown;
using testing::sets::ExpectError;
using testing::sets::Fill;
using testing::sets::GatherAll;
using testing::sets::IndexOf;
using testing::sets::kAllTypes;
using testing::sets::Reduce;
using testing::sets::RunSets;
using testing::sets::Same;
using testing::sets::Val;
using Clock = std::chrono::steady_clock;

// ---- Join and barrier per set -----------------------------------------------------------------

TEST(SetJoin, UnevenDataWithinASet) {
  auto res = RunSets(4, [](int rank, int size, const std::string& dir) -> Status {
    InitOptions o;
    o.process_sets = {{1, 2, 3}};
    HVD_RETURN_IF_ERROR(InitRankWith(rank, size, dir, o));
    if (rank == 0) {
      HVD_RETURN_IF_ERROR(ExpectError("join outside the set", Join(nullptr, 1),
                                      StatusCode::kInvalidArgument, {"process set 1"}));
      HVD_RETURN_IF_ERROR(ExpectError("barrier outside the set", Barrier(1),
                                      StatusCode::kInvalidArgument, {"process set 1"}));
    } else {
      const std::vector<int> members = {1, 2, 3};
      for (int round = 0; round < 2; ++round) {
        // Round 0: job rank r has r batches (rank 3 joins last); round 1: reversed (rank 1 last).
        const int batches = round == 0 ? rank : 4 - rank;
        for (int step = 0; step < batches; ++step) {
          const std::string s =
              " (round " + std::to_string(round) + ", step " + std::to_string(step) + ")";
          std::vector<int> active;
          for (int m : members) {
            if ((round == 0 ? m : 4 - m) > step) active.push_back(m);
          }
          AllreduceOptions avg;
          avg.process_set = 1;
          std::vector<float> g(10, static_cast<float>(rank));
          HVD_RETURN_IF_ERROR(Allreduce("grad", MakeTensor(g.data(), DataType::kFloat32, 10),
                                        MakeTensor(g.data(), DataType::kFloat32, 10), avg));
          float mean = 0;
          for (int m : active) mean += static_cast<float>(m);
          mean /= static_cast<float>(active.size());
          HVD_RETURN_IF_ERROR(ExpectEqual("average" + s, g, std::vector<float>(10, mean)));
          AllreduceOptions sum = testing::Sum();
          sum.process_set = 1;
          std::vector<int32_t> c(3, 1);
          HVD_RETURN_IF_ERROR(Allreduce("count", MakeTensor(c.data(), DataType::kInt32, 3),
                                        MakeTensor(c.data(), DataType::kInt32, 3), sum));
          HVD_RETURN_IF_ERROR(ExpectEqual(
              "count" + s, c, std::vector<int32_t>(3, static_cast<int>(active.size()))));
          int32_t me = rank;
          Handle h = AllgatherAsync("who", Tensor{&me, DataType::kInt32, {1}}, {}, 1);
          HVD_RETURN_IF_ERROR(h.Wait().WithContext("allgather" + s));
          const int32_t* p = static_cast<const int32_t*>(h.output_data());
          HVD_RETURN_IF_ERROR(ExpectEqual("allgather" + s,
                                          std::vector<int32_t>(p, p + h.output_bytes() / 4),
                                          std::vector<int32_t>(active.begin(), active.end())));
          if (round == 0 && step == 1) {
            // Job rank 1 has joined (or will, before this can run): it cannot be a broadcast
            // root, and the error names it by its job rank.
            std::vector<int32_t> b(4, rank);
            Status st = Broadcast("from.joined", MakeTensor(b.data(), DataType::kInt32, 4), 1, 1);
            HVD_RETURN_IF_ERROR(ExpectError("broadcast from a joined root" + s, st,
                                            StatusCode::kAborted, {"rank 1", "joined"}));
          }
        }
        int last = -1;
        HVD_RETURN_IF_ERROR(Join(&last, 1).WithContext("join round " + std::to_string(round)));
        const int want = round == 0 ? 3 : 1;
        HVD_RETURN_IF_ERROR(Check(last == want, "round " + std::to_string(round) +
                                                    ": last joined rank " + std::to_string(last) +
                                                    ", want job rank " + std::to_string(want)));
        HVD_RETURN_IF_ERROR(Barrier(1));
      }
    }
    // The global set is unaffected by the set's joins.
    std::vector<int64_t> all;
    HVD_RETURN_IF_ERROR(GatherAll("done", rank, &all));
    HVD_RETURN_IF_ERROR(ExpectEqual("global allgather", all, std::vector<int64_t>{0, 1, 2, 3}));
    int last = -1;
    HVD_RETURN_IF_ERROR(Join(&last));
    HVD_RETURN_IF_ERROR(Barrier());
    return BarrierAndShutdown();
  });
  HVD_EXPECT_RANKS_OK(res);
}

TEST(SetBarrier, WaitsForEveryMemberOnly) {
  auto res = RunSets(4, [](int rank, int size, const std::string& dir) -> Status {
    InitOptions o;
    o.process_sets = {{0, 1}, {2, 3}};
    HVD_RETURN_IF_ERROR(InitRankWith(rank, size, dir, o));
    const int set = rank <= 1 ? 1 : 2;
    // Rank 1 arrives 300 ms late at set 1's barrier: rank 0 must wait for it; set 2 must not.
    // Compared as instants of the host's monotonic clock (the same in every process), not as
    // durations: the ranks leave Init and the global barrier at moments of their own.
    HVD_RETURN_IF_ERROR(Barrier());
    if (rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    const auto us = [] {
      return std::chrono::duration_cast<std::chrono::microseconds>(Clock::now().time_since_epoch())
          .count();
    };
    const int64_t arrived = us();
    for (int i = 0; i < 3; ++i) HVD_RETURN_IF_ERROR(Barrier(set));
    const int64_t returned = us();
    std::vector<int64_t> arrivals, returns;
    HVD_RETURN_IF_ERROR(GatherAll("arrived", arrived, &arrivals));
    HVD_RETURN_IF_ERROR(GatherAll("returned", returned, &returns));
    for (int r : {0, 1}) {
      HVD_RETURN_IF_ERROR(
          Check(returns[r] >= arrivals[1], "set 1's barrier returned on rank " + std::to_string(r) +
                                               " " + std::to_string(arrivals[1] - returns[r]) +
                                               " us before rank 1 came"));
    }
    HVD_RETURN_IF_ERROR(Check(std::max(returns[2], returns[3]) < arrivals[1],
                              "set 2's barrier waited for rank 1 of set 1"));
    return BarrierAndShutdown();
  });
  HVD_EXPECT_RANKS_OK(res);
}

// ---- Every collective x every dtype inside a set ----------------------------------------------

// `*allreduces` counts the allreduce tensors run.
Status RunMatrix(int rank, int* allreduces) {
  *allreduces = 0;
  struct Target {
    int id;
    std::vector<int> members;
  };
  std::vector<Target> targets;
  for (int id : ProcessSetIds()) {
    if (!ProcessSetIncluded(id)) continue;
    Target& t = targets.emplace_back();
    t.id = id;
    HVD_RETURN_IF_ERROR(ProcessSetRanks(id, &t.members));
  }
  const ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax,
                           ReduceOp::kProduct};
  for (int iter = 0; iter < 2; ++iter) {  // the second time from the response cache
    struct Pending {
      std::string what;
      Handle h;
      std::function<Status(const Handle&)> verify;
    };
    std::deque<std::vector<char>> keep;  // buffers outliving the operations
    std::vector<Pending> pending;
    for (const Target& tg : targets) {
      const int m = static_cast<int>(tg.members.size());
      const int k = IndexOf(tg.members, rank);
      for (size_t di = 0; di < std::size(kAllTypes); ++di) {
        const DataType dt = kAllTypes[di];
        const std::string dn(DataTypeName(dt));
        const std::string in_set =
            " " + dn + " in set " + std::to_string(tg.id) + " iter " + std::to_string(iter);
        // Allreduce, every op (in place for odd ones), two tensors each: they fuse.
        for (size_t oi = 0; oi < std::size(kOps); ++oi) {
          for (int copy = 0; copy < 2; ++copy) {
            const ReduceOp op = kOps[oi];
            const int64_t n = copy == 0 ? 7 : 3;
            const int salt = static_cast<int>(oi) + 10 * iter + 100 * tg.id + 1000 * copy;
            AllreduceOptions ao;
            ao.op = op;
            ao.process_set = tg.id;
            std::vector<char>& in = keep.emplace_back(Fill(dt, rank, n, salt));
            std::vector<char>& out = (oi + copy) % 2 ? in : keep.emplace_back(in.size());
            const std::string what =
                "allreduce " + std::string(ReduceOpName(op)) + " #" + std::to_string(copy) + in_set;
            Handle h = AllreduceAsync(
                "ar" + std::to_string(copy) + "." + dn + "." + std::string(ReduceOpName(op)),
                MakeTensor(in.data(), dt, n), MakeTensor(out.data(), dt, n), ao);
            if (dt == DataType::kBool && op == ReduceOp::kAverage) {
              HVD_RETURN_IF_ERROR(Check(h.Ready(), what + " must fail at once"));
              HVD_RETURN_IF_ERROR(
                  ExpectError(what, h.Wait(), StatusCode::kInvalidArgument, {"bool", "average"}));
              continue;
            }
            std::vector<double> want(n);
            for (int64_t i = 0; i < n; ++i) {
              std::vector<double> xs;
              for (int r : tg.members) xs.push_back(Val(dt, r, i, salt));
              want[i] = Reduce(dt, op, xs, 1.0 / m);
            }
            char* outp = out.data();
            ++*allreduces;
            pending.push_back({what, h, [=](const Handle&) {
                                 return Same(what, dt, outp, n * DataTypeSize(dt), want);
                               }});
          }
        }
        // Allgather: (k + iter) % 3 rows of 2 (0 rows on some ranks).
        {
          const int salt = 20 + iter + 100 * tg.id;
          const int64_t rows = (k + iter) % 3;
          std::vector<char>& in = keep.emplace_back(Fill(dt, rank, rows * 2, salt));
          std::vector<double> want;
          std::vector<int64_t> splits;
          for (int j = 0; j < m; ++j) {
            splits.push_back((j + iter) % 3);
            for (int64_t i = 0; i < splits.back() * 2; ++i) {
              want.push_back(Val(dt, tg.members[j], i, salt));
            }
          }
          const std::string what = "allgather" + in_set;
          Handle h = AllgatherAsync("ag." + dn, Tensor{in.data(), dt, {rows, 2}}, {}, tg.id);
          pending.push_back(
              {what, h, [=](const Handle& h) -> Status {
                 HVD_RETURN_IF_ERROR(Check(h.output_count() == 1, what + " count"));
                 HVD_RETURN_IF_ERROR(ExpectEqual(what + " splits", h.output_splits(), splits));
                 HVD_RETURN_IF_ERROR(
                     Check(h.output_shape() ==
                               std::vector<int64_t>{static_cast<int64_t>(want.size() / 2), 2},
                           what + " shape"));
                 return Same(what, dt, h.output_data(), h.output_bytes(), want);
               }});
        }
        // Broadcast from a member that changes with the dtype.
        {
          const int salt = 30 + iter + 100 * tg.id;
          const int root = tg.members[(di + iter) % m];
          std::vector<char>& buf = keep.emplace_back(Fill(dt, rank, 5, rank == root ? salt : 99));
          std::vector<double> want;
          for (int i = 0; i < 5; ++i) want.push_back(Val(dt, root, i, salt));
          const std::string what = "broadcast from " + std::to_string(root) + in_set;
          Handle h = BroadcastAsync("bc." + dn, MakeTensor(buf.data(), dt, 5), root, {}, tg.id);
          char* p = buf.data();
          pending.push_back({what, h, [=](const Handle&) {
                               return Same(what, dt, p, 5 * DataTypeSize(dt), want);
                             }});
        }
        // Alltoall: member j sends (j + p + iter) % 3 rows of 2 to member p.
        {
          const int salt = 40 + iter + 100 * tg.id;
          std::vector<int64_t> splits(m);
          int64_t rows = 0;
          for (int p = 0; p < m; ++p) rows += splits[p] = (k + p + iter) % 3;
          std::vector<char>& in = keep.emplace_back(Fill(dt, rank, rows * 2, salt));
          std::vector<double> want;
          std::vector<int64_t> recv;
          for (int j = 0; j < m; ++j) {
            int64_t off = 0;
            for (int p = 0; p < k; ++p) off += (j + p + iter) % 3;
            const int64_t cnt = (j + k + iter) % 3;
            recv.push_back(cnt);
            for (int64_t i = off * 2; i < (off + cnt) * 2; ++i) {
              want.push_back(Val(dt, tg.members[j], i, salt));
            }
          }
          const std::string what = "alltoall" + in_set;
          Handle h =
              AlltoallAsync("a2a." + dn, Tensor{in.data(), dt, {rows, 2}}, splits, {}, tg.id);
          pending.push_back({what, h, [=](const Handle& h) -> Status {
                               HVD_RETURN_IF_ERROR(ExpectEqual(what + " received splits",
                                                               h.received_splits(), recv));
                               return Same(what, dt, h.output_data(), h.output_bytes(), want);
                             }});
        }
        // Reducescatter, sum and average: 2m + 1 rows of 2 (uneven shares).
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
          const int salt = 50 + static_cast<int>(op) + 10 * iter + 100 * tg.id;
          const int64_t rows = 2 * m + 1;
          AllreduceOptions ao;
          ao.op = op;
          ao.process_set = tg.id;
          std::vector<char>& in = keep.emplace_back(Fill(dt, rank, rows * 2, salt));
          const std::string what = "reducescatter " + std::string(ReduceOpName(op)) + in_set;
          Handle h = ReducescatterAsync("rs." + dn + "." + std::string(ReduceOpName(op)),
                                        Tensor{in.data(), dt, {rows, 2}}, ao);
          if (dt == DataType::kBool && op == ReduceOp::kAverage) {
            HVD_RETURN_IF_ERROR(Check(h.Ready(), what + " must fail at once"));
            HVD_RETURN_IF_ERROR(ExpectError(what, h.Wait(), StatusCode::kInvalidArgument));
            continue;
          }
          std::vector<int64_t> shares(m);
          int64_t first = 0;
          for (int q = 0; q < m; ++q) {
            shares[q] = rows / m + (q < rows % m ? 1 : 0);
            if (q < k) first += shares[q];
          }
          std::vector<double> want;
          for (int64_t i = first * 2; i < (first + shares[k]) * 2; ++i) {
            std::vector<double> xs;
            for (int r : tg.members) xs.push_back(Val(dt, r, i, salt));
            want.push_back(Reduce(dt, op, xs, 1.0 / m));
          }
          const int64_t mine = shares[k];
          pending.push_back(
              {what, h, [=](const Handle& h) -> Status {
                 HVD_RETURN_IF_ERROR(ExpectEqual(what + " splits", h.output_splits(), shares));
                 HVD_RETURN_IF_ERROR(
                     Check(h.output_shape() == std::vector<int64_t>{mine, 2}, what + " shape"));
                 return Same(what, dt, h.output_data(), h.output_bytes(), want);
               }});
        }
      }
    }
    for (Pending& p : pending) {
      HVD_RETURN_IF_ERROR(p.h.Wait().WithContext(p.what));
      HVD_RETURN_IF_ERROR(p.verify(p.h));
    }
  }
  return Status::OK();
}

struct MatrixParam {
  int size;
  bool plain;  // no response cache and no fusion: every operation negotiated and run alone
};

class EveryCollectiveEveryDtype : public ::testing::TestWithParam<MatrixParam> {};

TEST_P(EveryCollectiveEveryDtype, InASetAndGlobally) {
  const bool plain = GetParam().plain;
  auto res = RunSets(GetParam().size, [&](int rank, int size, const std::string& dir) -> Status {
    InitOptions o;
    if (size > 1) {  // ranks 1..size-1: set ranks differ from job ranks
      std::vector<int> tail(size - 1);
      std::iota(tail.begin(), tail.end(), 1);
      o.process_sets = {tail};
    }
    std::map<std::string, std::string> env;
    if (plain) env = {{"HVD_CACHE_CAPACITY", "0"}, {"HVD_FUSION_THRESHOLD", "0"}};
    HVD_RETURN_IF_ERROR(InitRankWith(rank, size, dir, o, env));
    int allreduces = 0;
    HVD_RETURN_IF_ERROR(RunMatrix(rank, &allreduces));
    const runtime::core::EngineStats stats = runtime::core::CurrentEngineStats();
    const std::string counts = std::to_string(stats.allreduce_collectives) +
                               " allreduce batches for " + std::to_string(allreduces) +
                               " tensors, " + std::to_string(stats.cache_hits) + " cache hits";
    if (plain) {
      HVD_RETURN_IF_ERROR(Check(
          stats.allreduce_collectives == static_cast<uint64_t>(allreduces) && stats.cache_hits == 0,
          "without fusion and cache: " + counts));
    } else {
      HVD_RETURN_IF_ERROR(Check(
          stats.allreduce_collectives < static_cast<uint64_t>(allreduces) && stats.cache_hits > 0,
          "fusion and cache: " + counts));
    }
    return BarrierAndShutdown();
  });
  HVD_EXPECT_RANKS_OK(res);
}

INSTANTIATE_TEST_SUITE_P(Ranks, EveryCollectiveEveryDtype,
                         ::testing::Values(MatrixParam{1, false}, MatrixParam{2, false},
                                           MatrixParam{3, false}, MatrixParam{4, false},
                                           MatrixParam{4, true}),
                         [](const auto& info) {
                           return std::to_string(info.param.size) + "ranks" +
                                  (info.param.plain ? "NoCacheNoFusion" : "");
                         });

}  // namespace
}  // namespace hvd
