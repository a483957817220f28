// Process sets running side by side (every rank its own process): disjoint and overlapping sets
// with operations in flight in several at once, per-set numbering of unnamed operations, a slow
// set never blocking another, large tensors over mixed links, and stalls naming the job rank.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <deque>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "process_sets_harness.h"

namespace hvd {
namespace {

using testing::Check;
using testing::ExpectEqual;
using testing::InitRankWith;
using testing::RunRanks;
using testing::sets::BarrierAndShutdown;
using testing::sets::ExpectError;
using testing::sets::GatherAll;
using testing::sets::IndexOf;
using testing::sets::MySets;
using testing::sets::RunSets;
using testing::sets::SumInEverySet;
using Clock = std::chrono::steady_clock;

// ---- Sets running side by side ----------------------------------------------------------------

TEST(ConcurrentSets, DisjointSetsRunDifferentCollectivesAtOnce) {
  auto res = RunSets(4, [](int rank, int size, const std::string& dir) -> Status {
    InitOptions o;
    o.process_sets = {{0, 1}, {2, 3}};
    HVD_RETURN_IF_ERROR(InitRankWith(rank, size, dir, o));
    constexpr int kIters = 50;
    if (rank <= 1) {  // set 1: allreduce loop
      AllreduceOptions ao = testing::Sum();
      ao.process_set = 1;
      for (int it = 0; it < kIters; ++it) {
        std::vector<int32_t> v(100 + it);
        for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int32_t>(rank * 1000 + it + i);
        Tensor t = MakeTensor(v.data(), DataType::kInt32, static_cast<int64_t>(v.size()));
        HVD_RETURN_IF_ERROR(Allreduce("loop", t, t, ao));
        std::vector<int32_t> want(v.size());
        for (size_t i = 0; i < v.size(); ++i) want[i] = static_cast<int32_t>(1000 + 2 * (it + i));
        HVD_RETURN_IF_ERROR(ExpectEqual("allreduce " + std::to_string(it), v, want));
      }
    } else {  // set 2: allgather loop, rows differing per rank and iteration
      for (int it = 0; it < kIters; ++it) {
        const int rows = (rank + it) % 4;
        std::vector<double> v(rows * 3);
        for (int i = 0; i < rows * 3; ++i) v[i] = rank * 1000 + it * 10 + i;
        Handle h = AllgatherAsync("loop", Tensor{v.data(), DataType::kFloat64, {rows, 3}}, {}, 2);
        HVD_RETURN_IF_ERROR(h.Wait());
        std::vector<double> want;
        std::vector<int64_t> splits;
        for (int r : {2, 3}) {
          splits.push_back((r + it) % 4);
          for (int i = 0; i < ((r + it) % 4) * 3; ++i) want.push_back(r * 1000 + it * 10 + i);
        }
        const double* p = static_cast<const double*>(h.output_data());
        HVD_RETURN_IF_ERROR(ExpectEqual("allgather " + std::to_string(it),
                                        std::vector<double>(p, p + h.output_bytes() / 8), want));
        HVD_RETURN_IF_ERROR(ExpectEqual("allgather splits", h.output_splits(), splits));
      }
    }
    HVD_RETURN_IF_ERROR(SumInEverySet(rank, "end"));
    return BarrierAndShutdown();
  });
  HVD_EXPECT_RANKS_OK(res);
}

// Unnamed operations are numbered per process set: ranks outside a set do not submit its
// unnamed operations, so one counter for all sets would give the next global ones different
// names on different ranks (and they would never match).
TEST(ConcurrentSets, UnnamedOperationsAreNumberedPerSet) {
  auto res = RunSets(3, [](int rank, int size, const std::string& dir) -> Status {
    InitOptions o;
    o.process_sets = {{1, 2}};
    HVD_RETURN_IF_ERROR(
        InitRankWith(rank, size, dir, o, {{"HVD_STALL_SHUTDOWN_TIME_SECONDS", "5"}}));
    for (int set : {1, 1, 1, 0, 0}) {
      if (set == 1 && rank == 0) continue;
      AllreduceOptions ao = testing::Sum();
      ao.process_set = set;
      int32_t v = rank + 1;
      Tensor t = MakeTensor(&v, DataType::kInt32, 1);
      HVD_RETURN_IF_ERROR(Allreduce("", t, t, ao));
      HVD_RETURN_IF_ERROR(
          Check(v == (set == 1 ? 5 : 6),
                "unnamed allreduce in set " + std::to_string(set) + ": " + std::to_string(v)));
    }
    return BarrierAndShutdown();
  });
  HVD_EXPECT_RANKS_OK(res);
}

TEST(ConcurrentSets, OverlappingSetsInterleave) {
  // With a timeline (rank 0's): the same names are in flight in several sets at once.
  const std::string path =
      ::testing::TempDir() + "/hvd_sets_timeline_" + std::to_string(getpid()) + ".json";
  auto res = RunSets(4, [&](int rank, int size, const std::string& dir) -> Status {
    InitOptions o;
    o.process_sets = {{0, 1, 2}, {1, 2, 3}, {2}};
    HVD_RETURN_IF_ERROR(InitRankWith(rank, size, dir, o, {{"HVD_TIMELINE", path}}));
    for (int it = 0; it < 20; ++it) {
      // Every set this rank is in gets an allreduce, a broadcast and an allgather, all in flight
      // together, submitted in an order that differs per rank.
      struct Op {
        int id;
        std::vector<int> members;
        std::vector<int64_t> ar, bc, ag;
        Handle har, hbc, hag;
      };
      std::deque<Op> ops;
      std::vector<int> ids;
      for (int id : ProcessSetIds()) {
        if (ProcessSetIncluded(id)) ids.push_back(id);
      }
      std::rotate(ids.begin(), ids.begin() + (rank + it) % ids.size(), ids.end());
      for (int id : ids) {
        Op& op = ops.emplace_back();
        op.id = id;
        HVD_RETURN_IF_ERROR(ProcessSetRanks(id, &op.members));
        op.ar.assign(9, rank * 100 + id * 10 + it);
        op.bc.assign(9, rank == op.members[it % op.members.size()] ? it * 7 + id : -5);
        op.ag.assign(rank + 1, rank * 100 + id);
        AllreduceOptions ao = testing::Sum();
        ao.process_set = id;
        op.har = AllreduceAsync("ar", MakeTensor(op.ar.data(), DataType::kInt64, 9),
                                MakeTensor(op.ar.data(), DataType::kInt64, 9), ao);
        op.hbc = BroadcastAsync("bc", MakeTensor(op.bc.data(), DataType::kInt64, 9),
                                op.members[it % op.members.size()], {}, id);
        op.hag = AllgatherAsync("ag", MakeTensor(op.ag.data(), DataType::kInt64, rank + 1), {}, id);
      }
      for (Op& op : ops) {
        const std::string what =
            "set " + std::to_string(op.id) + " iteration " + std::to_string(it);
        HVD_RETURN_IF_ERROR(op.har.Wait().WithContext(what));
        HVD_RETURN_IF_ERROR(op.hbc.Wait().WithContext(what));
        HVD_RETURN_IF_ERROR(op.hag.Wait().WithContext(what));
        int64_t sum = 0;
        std::vector<int64_t> ag;
        for (int m : op.members) {
          sum += m * 100 + op.id * 10 + it;
          for (int i = 0; i <= m; ++i) ag.push_back(m * 100 + op.id);
        }
        HVD_RETURN_IF_ERROR(ExpectEqual(what + " allreduce", op.ar, std::vector<int64_t>(9, sum)));
        HVD_RETURN_IF_ERROR(
            ExpectEqual(what + " broadcast", op.bc, std::vector<int64_t>(9, it * 7 + op.id)));
        const int64_t* p = static_cast<const int64_t*>(op.hag.output_data());
        HVD_RETURN_IF_ERROR(ExpectEqual(
            what + " allgather", std::vector<int64_t>(p, p + op.hag.output_bytes() / 8), ag));
      }
    }
    // The one-rank set {2}: every collective returns rank 2's own data.
    if (rank == 2) {
      std::vector<float> in = {1, -2, 3, 4}, out(4);
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax,
                          ReduceOp::kProduct, ReduceOp::kAdasum}) {
        AllreduceOptions ao;
        ao.op = op;
        ao.process_set = 3;
        std::fill(out.begin(), out.end(), 0.0f);
        HVD_RETURN_IF_ERROR(Allreduce("solo", MakeTensor(in.data(), DataType::kFloat32, 4),
                                      MakeTensor(out.data(), DataType::kFloat32, 4), ao));
        HVD_RETURN_IF_ERROR(ExpectEqual("solo " + std::string(ReduceOpName(op)), out, in));
      }
      Tensor t{in.data(), DataType::kFloat32, {2, 2}};
      for (const char* what : {"allgather", "alltoall", "reducescatter"}) {
        AllreduceOptions ao = testing::Sum();
        ao.process_set = 3;
        Handle h = std::string(what) == "allgather"  ? AllgatherAsync("solo", t, {}, 3)
                   : std::string(what) == "alltoall" ? AlltoallAsync("solo", t, {}, {}, 3)
                                                     : ReducescatterAsync("solo", t, ao);
        HVD_RETURN_IF_ERROR(h.Wait().WithContext(what));
        const float* p = static_cast<const float*>(h.output_data());
        HVD_RETURN_IF_ERROR(ExpectEqual(std::string("solo ") + what,
                                        std::vector<float>(p, p + h.output_bytes() / 4), in));
        HVD_RETURN_IF_ERROR(Check(h.output_shape() == std::vector<int64_t>{2, 2} &&
                                      h.output_splits() == std::vector<int64_t>{2},
                                  std::string("solo ") + what + " shape/splits"));
      }
      HVD_RETURN_IF_ERROR(Broadcast("solo", t, 2, 3));
      HVD_RETURN_IF_ERROR(Barrier(3));
      int last = -1;
      HVD_RETURN_IF_ERROR(Join(&last, 3));
      HVD_RETURN_IF_ERROR(Check(last == 2, "solo join: last " + std::to_string(last)));
    }
    return BarrierAndShutdown();
  });
  HVD_EXPECT_RANKS_OK(res);
  std::ifstream in(path);
  ASSERT_TRUE(in.good()) << path;
  nlohmann::json trace;
  ASSERT_NO_THROW(trace = nlohmann::json::parse(in)) << "timeline is not valid JSON";
  std::set<std::string> names;
  for (const auto& e : trace) {
    if (e.value("ph", "") == "M") names.insert(e["args"].value("name", ""));
  }
  for (const char* name : {"ar", "bc", "ag"}) EXPECT_TRUE(names.count(name)) << name;
  std::remove(path.c_str());
}

TEST(ConcurrentSets, ASlowSetNeverBlocksAnother) {
  auto res = RunSets(4, [](int rank, int size, const std::string& dir) -> Status {
    InitOptions o;
    o.process_sets = {{0, 1}, {2, 3}};
    HVD_RETURN_IF_ERROR(InitRankWith(rank, size, dir, o));
    HVD_RETURN_IF_ERROR(Barrier());
    const auto start = Clock::now();
    auto arrived = start;  // when this rank submitted set A's allreduce
    if (rank <= 1) {       // set A: rank 0 waits for rank 1, which comes 2 s late
      if (rank == 1) std::this_thread::sleep_for(std::chrono::seconds(2));
      arrived = Clock::now();
      std::vector<float> v(16, 1.0f);
      AllreduceOptions ao = testing::Sum();
      ao.process_set = 1;
      HVD_RETURN_IF_ERROR(Allreduce("slow", MakeTensor(v.data(), DataType::kFloat32, 16),
                                    MakeTensor(v.data(), DataType::kFloat32, 16), ao));
      HVD_RETURN_IF_ERROR(ExpectEqual("slow", v, std::vector<float>(16, 2.0f)));
    } else {  // set B: 20 allreduces meanwhile
      for (int i = 0; i < 20; ++i) {
        std::vector<float> v(16, static_cast<float>(rank + i));
        AllreduceOptions ao = testing::Sum();
        ao.process_set = 2;
        HVD_RETURN_IF_ERROR(Allreduce("fast", MakeTensor(v.data(), DataType::kFloat32, 16),
                                      MakeTensor(v.data(), DataType::kFloat32, 16), ao));
        HVD_RETURN_IF_ERROR(
            ExpectEqual("fast", v, std::vector<float>(16, static_cast<float>(5 + 2 * i))));
      }
    }
    const auto returned = Clock::now();
    const int64_t ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(returned - start).count();
    // Instants of the host's monotonic clock (the same in every process): the ranks leave the
    // barrier at moments of their own, so durations alone cannot say who waited for whom.
    const auto us = [](Clock::time_point t) {
      return std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
    };
    std::vector<int64_t> all, arrivals, returns;
    HVD_RETURN_IF_ERROR(GatherAll("times", ms, &all));
    HVD_RETURN_IF_ERROR(GatherAll("arrivals", us(arrived), &arrivals));
    HVD_RETURN_IF_ERROR(GatherAll("returns", us(returned), &returns));
    const std::string times = "A took " + std::to_string(all[0]) + "/" + std::to_string(all[1]) +
                              " ms, B " + std::to_string(all[2]) + "/" + std::to_string(all[3]) +
                              " ms";
    HVD_RETURN_IF_ERROR(
        Check(returns[0] >= arrivals[1], "set A finished before its late rank came: " + times));
    HVD_RETURN_IF_ERROR(
        Check(std::max(returns[2], returns[3]) < arrivals[1], "set B waited for set A: " + times));
    return BarrierAndShutdown();
  });
  HVD_EXPECT_RANKS_OK(res);
}

TEST(ConcurrentSets, LargeTensorsInSetsAcrossSimulatedHosts) {
  // Hosts a a b b: shared memory within a host, TCP across, hierarchical allreduce in the global
  // set; the sets' views mix both kinds of links. Tensors large enough for the ring and the
  // pipelined broadcast.
  auto res = RunSets(4, [](int rank, int size, const std::string& dir) -> Status {
    InitOptions o;
    o.process_sets = {{0, 1}, {1, 2}, {0, 2, 3}, {3}};
    HVD_RETURN_IF_ERROR(InitRankWith(
        rank, size, dir, o,
        {{"HVD_HOSTNAME", rank < 2 ? "host-a" : "host-b"}, {"HVD_ADVERTISE_ADDR", "127.0.0.1"}}));
    constexpr int64_t kN = 300001;  // odd: uneven ring segments
    for (int it = 0; it < 2; ++it) {
      struct Op {
        int id;
        std::vector<int> members;
        std::vector<float> ar;
        std::vector<int32_t> bc, ag, rs;
        Handle har, hbc, hag, hrs;
      };
      std::deque<Op> ops;
      for (int id : MySets()) {
        Op& op = ops.emplace_back();
        op.id = id;
        HVD_RETURN_IF_ERROR(ProcessSetRanks(id, &op.members));
        const int root = op.members[(it + id) % op.members.size()];
        op.ar.resize(kN);
        op.bc.resize(kN);
        op.ag.resize(kN / 3 + rank);
        op.rs.resize(kN);
        for (int64_t i = 0; i < kN; ++i) {
          op.ar[i] = static_cast<float>((i + rank + id) % 17);
          op.bc[i] = rank == root ? static_cast<int32_t>(i * 3 + id) : -1;
          op.rs[i] = static_cast<int32_t>((i * 5 + rank) % 101);
        }
        for (size_t i = 0; i < op.ag.size(); ++i) op.ag[i] = rank * 1000000 + static_cast<int>(i);
        AllreduceOptions ao = testing::Sum();
        ao.process_set = id;
        op.har = AllreduceAsync("big.ar", MakeTensor(op.ar.data(), DataType::kFloat32, kN),
                                MakeTensor(op.ar.data(), DataType::kFloat32, kN), ao);
        op.hbc =
            BroadcastAsync("big.bc", MakeTensor(op.bc.data(), DataType::kInt32, kN), root, {}, id);
        op.hag = AllgatherAsync(
            "big.ag",
            MakeTensor(op.ag.data(), DataType::kInt32, static_cast<int64_t>(op.ag.size())), {}, id);
        op.hrs = ReducescatterAsync("big.rs", MakeTensor(op.rs.data(), DataType::kInt32, kN), ao);
      }
      for (Op& op : ops) {
        const std::string what =
            "set " + std::to_string(op.id) + " iteration " + std::to_string(it);
        const int m = static_cast<int>(op.members.size());
        const int k = IndexOf(op.members, rank);
        const int root = op.members[(it + op.id) % op.members.size()];
        HVD_RETURN_IF_ERROR(op.har.Wait().WithContext(what + " allreduce"));
        HVD_RETURN_IF_ERROR(op.hbc.Wait().WithContext(what + " broadcast"));
        HVD_RETURN_IF_ERROR(op.hag.Wait().WithContext(what + " allgather"));
        HVD_RETURN_IF_ERROR(op.hrs.Wait().WithContext(what + " reducescatter"));
        for (int64_t i = 0; i < kN; ++i) {
          float want = 0;
          for (int r : op.members) want += static_cast<float>((i + r + op.id) % 17);
          if (op.ar[i] != want) {
            return Internal(what + " allreduce: element " + std::to_string(i) + " is " +
                            std::to_string(op.ar[i]) + ", want " + std::to_string(want));
          }
          if (op.bc[i] != static_cast<int32_t>(i * 3 + op.id)) {
            return Internal(what + " broadcast from " + std::to_string(root) + ": element " +
                            std::to_string(i) + " is " + std::to_string(op.bc[i]));
          }
        }
        std::vector<int32_t> ag;
        for (int r : op.members) {
          for (int64_t i = 0; i < kN / 3 + r; ++i) ag.push_back(r * 1000000 + static_cast<int>(i));
        }
        const int32_t* p = static_cast<const int32_t*>(op.hag.output_data());
        HVD_RETURN_IF_ERROR(ExpectEqual(
            what + " allgather", std::vector<int32_t>(p, p + op.hag.output_bytes() / 4), ag));
        int64_t first = 0;
        for (int q = 0; q < k; ++q) first += kN / m + (q < kN % m ? 1 : 0);
        const int64_t share = kN / m + (k < kN % m ? 1 : 0);
        std::vector<int32_t> rs;
        for (int64_t i = first; i < first + share; ++i) {
          int32_t sum = 0;
          for (int r : op.members) sum += static_cast<int32_t>((i * 5 + r) % 101);
          rs.push_back(sum);
        }
        const int32_t* q = static_cast<const int32_t*>(op.hrs.output_data());
        HVD_RETURN_IF_ERROR(ExpectEqual(
            what + " reducescatter", std::vector<int32_t>(q, q + op.hrs.output_bytes() / 4), rs));
      }
    }
    return BarrierAndShutdown();
  });
  HVD_EXPECT_RANKS_OK(res);
}

TEST(ConcurrentSets, GroupedAllreduceScalesAndAlltoallSplitsInASet) {
  auto res = RunSets(4, [](int rank, int size, const std::string& dir) -> Status {
    InitOptions o;
    o.process_sets = {{1, 2, 3}};
    HVD_RETURN_IF_ERROR(InitRankWith(rank, size, dir, o));
    if (rank >= 1) {
      for (int it = 0; it < 3; ++it) {
        // A grouped allreduce of three dtypes with prescale and postscale (sum: 2 * 3 * 0.5).
        std::vector<float> a(5, static_cast<float>(rank));
        std::vector<int64_t> b(3, rank * 2);
        std::vector<double> c(4, rank + 0.5), c_out(4);
        AllreduceOptions ao = testing::Sum();
        ao.prescale = 2;
        ao.postscale = 0.5;
        ao.process_set = 1;
        HVD_RETURN_IF_ERROR(GroupedAllreduce(
            "grp",
            {MakeTensor(a.data(), DataType::kFloat32, 5), MakeTensor(b.data(), DataType::kInt64, 3),
             MakeTensor(c.data(), DataType::kFloat64, 4)},
            {MakeTensor(a.data(), DataType::kFloat32, 5), MakeTensor(b.data(), DataType::kInt64, 3),
             MakeTensor(c_out.data(), DataType::kFloat64, 4)},
            ao));
        HVD_RETURN_IF_ERROR(ExpectEqual("grouped float32", a, std::vector<float>(5, 6.0f)));
        HVD_RETURN_IF_ERROR(ExpectEqual("grouped int64", b, std::vector<int64_t>(3, 12)));
        HVD_RETURN_IF_ERROR(ExpectEqual("grouped float64", c_out, std::vector<double>(4, 7.5)));
        // Alltoall, splits left to hvd: 6 rows over 3 members, 2 to each.
        std::vector<int32_t> x(6);
        for (int i = 0; i < 6; ++i) x[i] = rank * 10 + i;
        Handle h = AlltoallAsync("a2a", MakeTensor(x.data(), DataType::kInt32, 6), {}, {}, 1);
        HVD_RETURN_IF_ERROR(h.Wait());
        const int k = rank - 1;
        std::vector<int32_t> want;
        for (int r = 1; r <= 3; ++r) {
          want.push_back(r * 10 + 2 * k);
          want.push_back(r * 10 + 2 * k + 1);
        }
        const int32_t* p = static_cast<const int32_t*>(h.output_data());
        HVD_RETURN_IF_ERROR(
            ExpectEqual("even alltoall", std::vector<int32_t>(p, p + h.output_bytes() / 4), want));
        HVD_RETURN_IF_ERROR(
            ExpectEqual("even alltoall splits", h.received_splits(), std::vector<int64_t>(3, 2)));
      }
      // Splits are per member of the set: 4 entries (the job's size) are refused, and 8 rows do
      // not divide among 3 members.
      std::vector<int32_t> x(8, 0);
      Handle h =
          AlltoallAsync("a2a.bad", MakeTensor(x.data(), DataType::kInt32, 8), {2, 2, 2, 2}, {}, 1);
      HVD_RETURN_IF_ERROR(ExpectError("alltoall with 4 splits in a set of 3", h.Wait(),
                                      StatusCode::kInvalidArgument, {"3"}));
      h = AlltoallAsync("a2a.bad", MakeTensor(x.data(), DataType::kInt32, 8), {}, {}, 1);
      HVD_RETURN_IF_ERROR(ExpectError("alltoall of 8 rows in a set of 3", h.Wait(),
                                      StatusCode::kInvalidArgument, {"8", "3"}));
    }
    return BarrierAndShutdown();
  });
  HVD_EXPECT_RANKS_OK(res);
}

// A request some member never submits fails after HVD_STALL_SHUTDOWN_TIME_SECONDS on every member
// that submitted it, naming the missing job rank, whether it was cached or not, and although
// nothing else happens in its set meanwhile: here job rank 3 sleeps, in the global set and in
// {1, 2, 3} at once. (Ranks then meet outside hvd, by the clock: any hvd wait longer than the
// shutdown time would fail too.)
TEST(ConcurrentSets, StallInASetNamesTheMissingJobRank) {
  testing::RunOptions ro;
  ro.timeout = std::chrono::seconds(30);
  auto res = RunRanks(
      4,
      [](int rank, int size, const std::string& dir) -> Status {
        InitOptions o;
        o.process_sets = {{1, 2, 3}};
        HVD_RETURN_IF_ERROR(
            InitRankWith(rank, size, dir, o, {{"HVD_STALL_SHUTDOWN_TIME_SECONDS", "1"}}));
        std::vector<float> v(4, 1.0f);
        Tensor t = MakeTensor(v.data(), DataType::kFloat32, 4);
        std::vector<int> sets = {0};
        if (rank >= 1) sets.push_back(1);
        for (int set : sets) {  // once with everyone, so that 'stuck' is cached
          AllreduceOptions ao;
          ao.process_set = set;
          HVD_RETURN_IF_ERROR(Allreduce("stuck", t, t, ao));
        }
        // Phase 0: only uncached requests stall; phase 1: only cached ones.
        for (const char* name : {"fresh", "stuck"}) {
          HVD_RETURN_IF_ERROR(Barrier());
          const auto start = Clock::now();
          if (rank != 3) {
            std::vector<Handle> handles;
            for (int set : sets) {
              AllreduceOptions ao;
              ao.process_set = set;
              handles.push_back(AllreduceAsync(name, t, t, ao));
            }
            for (size_t i = 0; i < sets.size(); ++i) {
              Status s = handles[i].WaitFor(std::chrono::duration_cast<std::chrono::milliseconds>(
                  start + std::chrono::milliseconds(2200) - Clock::now()));
              const auto ms =
                  std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start)
                      .count();
              HVD_RETURN_IF_ERROR(
                  ExpectError("set " + std::to_string(sets[i]) + ": stalled '" + name + "' after " +
                                  std::to_string(ms) + " ms",
                              s, StatusCode::kAborted,
                              {"rank 3 has not submitted allreduce '" + std::string(name) + "'"}));
            }
          }
          std::this_thread::sleep_until(start + std::chrono::milliseconds(2700));
        }
        return BarrierAndShutdown();
      },
      ro);
  HVD_EXPECT_RANKS_OK(res);
}

}  // namespace
}  // namespace hvd
