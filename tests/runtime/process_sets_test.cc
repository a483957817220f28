// Process sets through the public API (hvd.h, "Process sets"), every rank its own process: static
// sets (InitOptions, HVD_PROCESS_SETS), dynamic sets (AddProcessSet/RemoveProcessSet), sets
// running concurrently without blocking each other, per-set join and barrier, every collective
// on every dtype inside a set, grouped and byte collectives, and Adasum.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <deque>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <set>
#include <thread>

#include "collectives/reduce.h"
#include "core/context.h"
#include "core/engine.h"
#include "runtime_env.h"
#include "testutil/multiproc.h"

namespace hvd {
namespace {

using runtime::collectives::BFloat16ToFloat;
using runtime::collectives::FloatToBFloat16;
using runtime::collectives::FloatToHalf;
using runtime::collectives::HalfToFloat;
using testing::Check;
using testing::Contains;
using testing::ExpectEqual;
using testing::InitRank;
using testing::InitRankWith;
using testing::RunRanks;
using Clock = std::chrono::steady_clock;

// RunRanks with a deadline that keeps a hang from stalling the whole binary.
testing::RunResult RunSets(int size, testing::RankFn fn) {
  testing::RunOptions o;
  o.timeout = std::chrono::seconds(30);
  return RunRanks(size, std::move(fn), o);
}

constexpr DataType kAllTypes[] = {DataType::kFloat32,  DataType::kFloat64, DataType::kFloat16,
                                  DataType::kBFloat16, DataType::kInt8,    DataType::kUInt8,
                                  DataType::kInt16,    DataType::kInt32,   DataType::kInt64,
                                  DataType::kBool};

std::string RanksText(const std::vector<int>& r) {
  std::string s = "[";
  for (size_t i = 0; i < r.size(); ++i) s += (i ? ", " : "") + std::to_string(r[i]);
  return s + "]";
}

// Fails unless `s` has `code` and its message contains every one of `parts`.
Status ExpectError(const std::string& what, const Status& s, StatusCode code,
                   const std::vector<std::string>& parts = {}) {
  if (s.code() != code) {
    return Internal(what + ": want " + Status::CodeName(code) + ", got " + s.ToString());
  }
  for (const std::string& p : parts) {
    if (!Contains(s.message(), p)) {
      return Internal(what + ": message lacks '" + p + "': " + s.message());
    }
  }
  return Status::OK();
}

int IndexOf(const std::vector<int>& v, int x) {
  auto it = std::find(v.begin(), v.end(), x);
  return it == v.end() ? -1 : static_cast<int>(it - v.begin());
}

// ---- Typed data: every value is a small integer, exact in every dtype ------------------------

void Put(DataType dt, void* p, size_t i, double v) {
  switch (dt) {
    case DataType::kFloat32:
      static_cast<float*>(p)[i] = static_cast<float>(v);
      break;
    case DataType::kFloat64:
      static_cast<double*>(p)[i] = v;
      break;
    case DataType::kFloat16:
      static_cast<uint16_t*>(p)[i] = FloatToHalf(static_cast<float>(v));
      break;
    case DataType::kBFloat16:
      static_cast<uint16_t*>(p)[i] = FloatToBFloat16(static_cast<float>(v));
      break;
    case DataType::kInt8:
      static_cast<int8_t*>(p)[i] = static_cast<int8_t>(v);
      break;
    case DataType::kUInt8:
      static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v);
      break;
    case DataType::kInt16:
      static_cast<int16_t*>(p)[i] = static_cast<int16_t>(v);
      break;
    case DataType::kInt32:
      static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v);
      break;
    case DataType::kInt64:
      static_cast<int64_t*>(p)[i] = static_cast<int64_t>(v);
      break;
    case DataType::kBool:
      static_cast<uint8_t*>(p)[i] = v != 0 ? 1 : 0;
      break;
  }
}

double Get(DataType dt, const void* p, size_t i) {
  switch (dt) {
    case DataType::kFloat32:
      return static_cast<const float*>(p)[i];
    case DataType::kFloat64:
      return static_cast<const double*>(p)[i];
    case DataType::kFloat16:
      return HalfToFloat(static_cast<const uint16_t*>(p)[i]);
    case DataType::kBFloat16:
      return BFloat16ToFloat(static_cast<const uint16_t*>(p)[i]);
    case DataType::kInt8:
      return static_cast<const int8_t*>(p)[i];
    case DataType::kUInt8:
      return static_cast<const uint8_t*>(p)[i];
    case DataType::kInt16:
      return static_cast<const int16_t*>(p)[i];
    case DataType::kInt32:
      return static_cast<const int32_t*>(p)[i];
    case DataType::kInt64:
      return static_cast<double>(static_cast<const int64_t*>(p)[i]);
    case DataType::kBool:
      return static_cast<const uint8_t*>(p)[i];
  }
  return 0;
}

// The value of element i on job rank `rank`: -3..3 (signed and floating), 0..3 (uint8), 0..1
// (bool). Sums and products over 4 ranks stay exact in every dtype (bfloat16: |x| <= 256).
double Val(DataType dt, int rank, int64_t i, int salt) {
  const int64_t h = rank * 7 + i * 3 + salt * 5 + (i / 7) * 2;
  switch (dt) {
    case DataType::kBool:
      return static_cast<double>(h % 2);
    case DataType::kUInt8:
      return static_cast<double>(h % 4);
    default:
      return static_cast<double>(h % 7 - 3);
  }
}

// A tensor's bytes, filled with Val(dt, rank, i, salt).
std::vector<char> Fill(DataType dt, int rank, int64_t count, int salt) {
  std::vector<char> b(std::max<size_t>(1, count * DataTypeSize(dt)));
  for (int64_t i = 0; i < count; ++i) Put(dt, b.data(), i, Val(dt, rank, i, salt));
  return b;
}

// x * factor as Scale (collectives/reduce.h) documents it, for the result of an average.
double ScaleRef(DataType dt, double x, double factor) {
  switch (dt) {
    case DataType::kFloat32:
      return static_cast<float>(x) * static_cast<float>(factor);
    case DataType::kFloat64:
      return x * factor;
    case DataType::kFloat16:
      return HalfToFloat(FloatToHalf(static_cast<float>(x) * static_cast<float>(factor)));
    case DataType::kBFloat16:
      return BFloat16ToFloat(FloatToBFloat16(static_cast<float>(x) * static_cast<float>(factor)));
    case DataType::kBool:
      return factor != 0 && x != 0 ? 1 : 0;
    default:  // nearest integer, ties away from zero, computed in long double
      return static_cast<double>(
          std::roundl(static_cast<long double>(x) * static_cast<long double>(factor)));
  }
}

// op over `xs` (one value per rank), exactly (bool: sum/max are or, min/product and).
double Reduce(DataType dt, ReduceOp op, const std::vector<double>& xs, double avg_factor) {
  if (dt == DataType::kBool) {
    bool any = false, all = true;
    for (double x : xs) {
      any = any || x != 0;
      all = all && x != 0;
    }
    return (op == ReduceOp::kSum || op == ReduceOp::kMax) ? any : all;
  }
  double sum = 0, mn = xs[0], mx = xs[0], prod = 1;
  for (double x : xs) {
    sum += x;
    mn = std::min(mn, x);
    mx = std::max(mx, x);
    prod *= x;
  }
  switch (op) {
    case ReduceOp::kSum:
      return sum;
    case ReduceOp::kAverage:
      return ScaleRef(dt, sum, avg_factor);
    case ReduceOp::kMin:
      return mn;
    case ReduceOp::kMax:
      return mx;
    case ReduceOp::kProduct:
      return prod;
    default:
      return NAN;
  }
}

// Compares `count` elements of dtype `dt` at `got` with `want`.
Status Same(const std::string& what, DataType dt, const void* got, size_t got_bytes,
            const std::vector<double>& want) {
  const size_t n = got_bytes / DataTypeSize(dt);
  if (n != want.size()) {
    return Internal(what + ": " + std::to_string(n) + " elements, want " +
                    std::to_string(want.size()));
  }
  for (size_t i = 0; i < n; ++i) {
    const double g = Get(dt, got, i);
    if (!(g == want[i])) {
      return Internal(what + ": element " + std::to_string(i) + " is " + std::to_string(g) +
                      ", want " + std::to_string(want[i]));
    }
  }
  return Status::OK();
}

// Every rank's `v`, gathered in the global set (job rank order).
Status GatherAll(const std::string& name, int64_t v, std::vector<int64_t>* all) {
  Handle h = AllgatherAsync(name, Tensor{&v, DataType::kInt64, {1}});
  HVD_RETURN_IF_ERROR(h.Wait());
  const int64_t* p = static_cast<const int64_t*>(h.output_data());
  all->assign(p, p + h.output_bytes() / sizeof(int64_t));
  return Status::OK();
}

// The sets this rank belongs to, by increasing id (the global set first).
std::vector<int> MySets() {
  std::vector<int> ids;
  for (int id : ProcessSetIds()) {
    if (ProcessSetIncluded(id)) ids.push_back(id);
  }
  return ids;
}

// Ranks do different work in different sets: none may shut down (which stops every rank) before
// all are done.
Status BarrierAndShutdown() {
  HVD_RETURN_IF_ERROR(Barrier().WithContext("final barrier"));
  return Shutdown();
}

// ---- Static sets ------------------------------------------------------------------------------

// Checks the query functions against `sets` (ids 1..n in order) on job rank `rank`.
Status CheckTable(int rank, const std::vector<std::vector<int>>& sets, int size) {
  std::vector<int> want_ids(sets.size() + 1);
  std::iota(want_ids.begin(), want_ids.end(), 0);
  HVD_RETURN_IF_ERROR(ExpectEqual("ProcessSetIds", ProcessSetIds(), want_ids));
  std::vector<int> all(size);
  std::iota(all.begin(), all.end(), 0);
  for (int id = 0; id <= static_cast<int>(sets.size()); ++id) {
    const std::vector<int>& members = id == 0 ? all : sets[id - 1];
    const std::string what = "set " + std::to_string(id);
    std::vector<int> got;
    HVD_RETURN_IF_ERROR(ProcessSetRanks(id, &got));
    HVD_RETURN_IF_ERROR(ExpectEqual(what + " ranks", got, members));
    HVD_RETURN_IF_ERROR(Check(ProcessSetSize(id) == static_cast<int>(members.size()),
                              what + " size " + std::to_string(ProcessSetSize(id))));
    const int idx = IndexOf(members, rank);
    HVD_RETURN_IF_ERROR(Check(
        ProcessSetRank(id) == idx,
        what + " rank " + std::to_string(ProcessSetRank(id)) + ", want " + std::to_string(idx)));
    HVD_RETURN_IF_ERROR(Check(ProcessSetIncluded(id) == (idx >= 0), what + " included"));
  }
  const int unknown = static_cast<int>(sets.size()) + 5;
  HVD_RETURN_IF_ERROR(Check(ProcessSetRank(unknown) == -1 && ProcessSetSize(unknown) == -1 &&
                                !ProcessSetIncluded(unknown),
                            "an unknown set must answer -1/-1/false"));
  std::vector<int> none;
  HVD_RETURN_IF_ERROR(ExpectError("ProcessSetRanks(unknown)", ProcessSetRanks(unknown, &none),
                                  StatusCode::kNotFound, {std::to_string(unknown)}));
  return Status::OK();
}

// A sum allreduce in every set the rank belongs to, submitted at once; checks the sums.
Status SumInEverySet(int rank, const std::string& name) {
  struct Pending {
    int id;
    std::vector<int> members;
    std::vector<int64_t> v;
    Handle h;
  };
  std::deque<Pending> pending;
  for (int id : ProcessSetIds()) {
    if (!ProcessSetIncluded(id)) continue;
    Pending& p = pending.emplace_back();
    p.id = id;
    HVD_RETURN_IF_ERROR(ProcessSetRanks(id, &p.members));
    p.v.assign(5, 0);
    for (int i = 0; i < 5; ++i) p.v[i] = (rank + 1) * 1000 + id * 10 + i;
    AllreduceOptions o = testing::Sum();
    o.process_set = id;
    Tensor t = MakeTensor(p.v.data(), DataType::kInt64, 5);
    p.h = AllreduceAsync(name, t, t, o);
  }
  for (Pending& p : pending) {
    HVD_RETURN_IF_ERROR(p.h.Wait().WithContext("sum in set " + std::to_string(p.id)));
    std::vector<int64_t> want(5, 0);
    for (int m : p.members) {
      for (int i = 0; i < 5; ++i) want[i] += (m + 1) * 1000 + p.id * 10 + i;
    }
    HVD_RETURN_IF_ERROR(ExpectEqual(name + " in set " + std::to_string(p.id), p.v, want));
  }
  return Status::OK();
}

// Non-members, unknown ids, broadcast roots: the submission checks of a set.
Status CheckSubmissionErrors(int rank, int size) {
  std::vector<int> ids = ProcessSetIds();
  std::string registered;
  for (int id : ids) registered += (registered.empty() ? "" : ", ") + std::to_string(id);
  std::vector<float> v(6, 1.0f);  // 6 rows: divisible among 1, 2 or 3 ranks (alltoall)
  Tensor t = MakeTensor(v.data(), DataType::kFloat32, 6);
  for (int id : ids) {
    if (ProcessSetIncluded(id)) continue;
    std::vector<int> members;
    HVD_RETURN_IF_ERROR(ProcessSetRanks(id, &members));
    const std::vector<std::string> parts = {"process set " + std::to_string(id), RanksText(members),
                                            "rank " + std::to_string(rank)};
    AllreduceOptions o;
    o.process_set = id;
    const std::string who = "rank " + std::to_string(rank) + " outside set " + std::to_string(id);
    HVD_RETURN_IF_ERROR(ExpectError(who + ": allreduce", Allreduce("x", t, t, o),
                                    StatusCode::kInvalidArgument, parts));
    HVD_RETURN_IF_ERROR(ExpectError(who + ": allgather", AllgatherAsync("x", t, {}, id).Wait(),
                                    StatusCode::kInvalidArgument, parts));
    HVD_RETURN_IF_ERROR(ExpectError(who + ": broadcast", Broadcast("x", t, members[0], id),
                                    StatusCode::kInvalidArgument, parts));
    HVD_RETURN_IF_ERROR(ExpectError(who + ": reducescatter", ReducescatterAsync("x", t, o).Wait(),
                                    StatusCode::kInvalidArgument, parts));
    HVD_RETURN_IF_ERROR(ExpectError(who + ": alltoall", AlltoallAsync("x", t, {}, {}, id).Wait(),
                                    StatusCode::kInvalidArgument, parts));
    HVD_RETURN_IF_ERROR(
        ExpectError(who + ": barrier", Barrier(id), StatusCode::kInvalidArgument, parts));
    HVD_RETURN_IF_ERROR(
        ExpectError(who + ": join", Join(nullptr, id), StatusCode::kInvalidArgument, parts));
  }
  // An unknown id: the error lists what exists.
  const int unknown = ids.back() + 3;
  AllreduceOptions o;
  o.process_set = unknown;
  Status s = Allreduce("x", t, t, o);
  HVD_RETURN_IF_ERROR(
      Check(!s.ok(), "allreduce in unknown set " + std::to_string(unknown) + " succeeded"));
  HVD_RETURN_IF_ERROR(
      Check(Contains(s.message(), std::to_string(unknown)) && Contains(s.message(), registered),
            "unknown set error must name it and list '" + registered + "': " + s.ToString()));
  s = Barrier(unknown);
  HVD_RETURN_IF_ERROR(Check(!s.ok() && Contains(s.message(), registered),
                            "barrier in unknown set: " + s.ToString()));
  // A broadcast root outside the set (but a rank of the job), and one outside the job.
  for (int id : ids) {
    if (!ProcessSetIncluded(id)) continue;
    std::vector<int> members;
    HVD_RETURN_IF_ERROR(ProcessSetRanks(id, &members));
    for (int root = 0; root < size; ++root) {
      if (std::binary_search(members.begin(), members.end(), root)) continue;
      HVD_RETURN_IF_ERROR(ExpectError(
          "broadcast in set " + std::to_string(id) + " from outside root " + std::to_string(root),
          Broadcast("outside", t, root, id), StatusCode::kInvalidArgument,
          {"root", std::to_string(root), "process set " + std::to_string(id)}));
    }
    HVD_RETURN_IF_ERROR(ExpectError("broadcast from root " + std::to_string(size),
                                    Broadcast("outside", t, size, id), StatusCode::kInvalidArgument,
                                    {std::to_string(size)}));
  }
  return Status::OK();
}

// Broadcast in every set the rank belongs to, from every member as root (a job rank).
Status BroadcastFromEveryRoot(int rank) {
  for (int id : ProcessSetIds()) {
    if (!ProcessSetIncluded(id)) continue;
    std::vector<int> members;
    HVD_RETURN_IF_ERROR(ProcessSetRanks(id, &members));
    for (int root : members) {
      std::vector<int32_t> v(33, rank == root ? 100 * root + id : -1);
      HVD_RETURN_IF_ERROR(Broadcast("bcast", MakeTensor(v.data(), DataType::kInt32, 33), root, id)
                              .WithContext("set " + std::to_string(id)));
      HVD_RETURN_IF_ERROR(
          ExpectEqual("broadcast in set " + std::to_string(id) + " from " + std::to_string(root), v,
                      std::vector<int32_t>(33, 100 * root + id)));
    }
  }
  return Status::OK();
}

TEST(StaticSets, FromInitOptions) {
  auto res = RunSets(4, [](int rank, int size, const std::string& dir) -> Status {
    InitOptions o;
    o.process_sets = {{1, 0}, {2, 3}, {3, 1, 2}};  // any order; kept sorted
    HVD_RETURN_IF_ERROR(InitRankWith(rank, size, dir, o));
    HVD_RETURN_IF_ERROR(CheckTable(rank, {{0, 1}, {2, 3}, {1, 2, 3}}, size));
    HVD_RETURN_IF_ERROR(SumInEverySet(rank, "sum"));
    HVD_RETURN_IF_ERROR(CheckSubmissionErrors(rank, size));
    HVD_RETURN_IF_ERROR(BroadcastFromEveryRoot(rank));
    HVD_RETURN_IF_ERROR(SumInEverySet(rank, "sum"));  // again, from the response cache
    // Static sets only: no changes after init.
    int id = -1;
    HVD_RETURN_IF_ERROR(ExpectError("AddProcessSet without dynamic sets",
                                    AddProcessSet({0, 2}, &id), StatusCode::kFailedPrecondition,
                                    {"HVD_DYNAMIC_PROCESS_SETS"}));
    HVD_RETURN_IF_ERROR(ExpectError("RemoveProcessSet without dynamic sets", RemoveProcessSet(1),
                                    StatusCode::kFailedPrecondition, {"HVD_DYNAMIC_PROCESS_SETS"}));
    HVD_RETURN_IF_ERROR(CheckTable(rank, {{0, 1}, {2, 3}, {1, 2, 3}}, size));
    return BarrierAndShutdown();
  });
  HVD_EXPECT_RANKS_OK(res);
}

TEST(StaticSets, FromEnvironmentFirstThenOptions) {
  auto res = RunSets(4, [](int rank, int size, const std::string& dir) -> Status {
    InitOptions o;
    o.process_sets = {{0, 2}};
    HVD_RETURN_IF_ERROR(InitRankWith(rank, size, dir, o, {{"HVD_PROCESS_SETS", "0,1;2,3"}}));
    HVD_RETURN_IF_ERROR(CheckTable(rank, {{0, 1}, {2, 3}, {0, 2}}, size));
    HVD_RETURN_IF_ERROR(SumInEverySet(rank, "sum"));
    HVD_RETURN_IF_ERROR(CheckSubmissionErrors(rank, size));
    HVD_RETURN_IF_ERROR(BroadcastFromEveryRoot(rank));
    HVD_RETURN_IF_ERROR(BarrierAndShutdown());
    // A new session from the environment alone, with dynamic sets from the environment too.
    setenv("HVD_DYNAMIC_PROCESS_SETS", "1", 1);
    HVD_RETURN_IF_ERROR(InitRank(rank, size, dir));
    HVD_RETURN_IF_ERROR(CheckTable(rank, {{0, 1}, {2, 3}}, size));
    int id = -1;
    HVD_RETURN_IF_ERROR(AddProcessSet({3, 0}, &id));
    HVD_RETURN_IF_ERROR(Check(id == 3, "first dynamic id " + std::to_string(id) + ", want 3"));
    HVD_RETURN_IF_ERROR(CheckTable(rank, {{0, 1}, {2, 3}, {0, 3}}, size));
    HVD_RETURN_IF_ERROR(SumInEverySet(rank, "sum"));
    // A static set can be removed like a dynamic one.
    HVD_RETURN_IF_ERROR(RemoveProcessSet(1));
    HVD_RETURN_IF_ERROR(ExpectEqual("ids", ProcessSetIds(), std::vector<int>{0, 2, 3}));
    return BarrierAndShutdown();
  });
  HVD_EXPECT_RANKS_OK(res);
}

TEST(StaticSets, QueriesBeforeInitAndAfterShutdown) {
  auto res = RunSets(2, [](int rank, int size, const std::string& dir) -> Status {
    auto uninitialized = [](const std::string& when) -> Status {
      HVD_RETURN_IF_ERROR(Check(ProcessSetIds().empty(), when + ": ProcessSetIds not empty"));
      HVD_RETURN_IF_ERROR(
          Check(ProcessSetRank(0) == -1 && ProcessSetSize(0) == -1 && !ProcessSetIncluded(0),
                when + ": global set answers"));
      std::vector<int> r;
      HVD_RETURN_IF_ERROR(ExpectError(when + ": ProcessSetRanks", ProcessSetRanks(0, &r),
                                      StatusCode::kFailedPrecondition));
      int id = -1;
      HVD_RETURN_IF_ERROR(ExpectError(when + ": AddProcessSet", AddProcessSet({0}, &id),
                                      StatusCode::kFailedPrecondition));
      return ExpectError(when + ": RemoveProcessSet", RemoveProcessSet(1),
                         StatusCode::kFailedPrecondition);
    };
    HVD_RETURN_IF_ERROR(uninitialized("before Init"));
    InitOptions o;
    o.process_sets = {{1}};
    HVD_RETURN_IF_ERROR(InitRankWith(rank, size, dir, o));
    HVD_RETURN_IF_ERROR(CheckTable(rank, {{1}}, size));
    HVD_RETURN_IF_ERROR(Shutdown());
    return uninitialized("after Shutdown");
  });
  HVD_EXPECT_RANKS_OK(res);
}

TEST(StaticSets, InvalidSetsFailInit) {
  auto res = RunSets(2, [](int rank, int size, const std::string& dir) -> Status {
    InitOptions o;
    o.process_sets = {{0, 2}};
    Status s = InitRankWith(rank, size, dir, o);
    HVD_RETURN_IF_ERROR(
        ExpectError("set with rank 2 of 2", s, StatusCode::kInvalidArgument, {"2"}));
    o.process_sets = {{}};
    s = InitRankWith(rank, size, dir, o);
    HVD_RETURN_IF_ERROR(ExpectError("an empty set", s, StatusCode::kInvalidArgument));
    s = InitRankWith(rank, size, dir, {}, {{"HVD_PROCESS_SETS", "0,x"}});
    HVD_RETURN_IF_ERROR(
        ExpectError("HVD_PROCESS_SETS=0,x", s, StatusCode::kInvalidArgument, {"HVD_PROCESS_SETS"}));
    // A set whose ranks are registered already (the global set's, or an earlier entry's) is that
    // set, as Horovod's ProcessSet objects find their id by their ranks.
    unsetenv("HVD_PROCESS_SETS");
    o.process_sets = {{1, 0}, {1}, {0, 1}, {1}};
    HVD_RETURN_IF_ERROR(InitRankWith(rank, size, dir, o));
    HVD_RETURN_IF_ERROR(CheckTable(rank, {{1}}, size));
    return Shutdown();
  });
  HVD_EXPECT_RANKS_OK(res);
}

TEST(StaticSets, RanksPassingDifferentSetsFailInit) {
  auto res = RunSets(3, [](int rank, int size, const std::string& dir) -> Status {
    InitOptions o;
    o.process_sets = {{0, 1}};
    if (rank == 2) o.process_sets = {{0, 2}};
    Status s = InitRankWith(rank, size, dir, o);
    HVD_RETURN_IF_ERROR(Check(!s.ok() && Contains(s.message(), "process_sets"),
                              "Init with sets differing per rank: " + s.ToString()));
    // Dynamic sets on some ranks only.
    InitOptions d;
    d.dynamic_process_sets = rank != 1;
    s = InitRankWith(rank, size, dir, d);
    return Check(!s.ok() && Contains(s.message(), "dynamic_process_sets"),
                 "Init with dynamic sets on some ranks only: " + s.ToString());
  });
  HVD_EXPECT_RANKS_OK(res);
}

TEST(StaticSets, MismatchesInASetNameJobRanks) {
  auto res = RunSets(4, [](int rank, int size, const std::string& dir) -> Status {
    InitOptions o;
    o.process_sets = {{1, 2, 3}};
    HVD_RETURN_IF_ERROR(InitRankWith(rank, size, dir, o));
    if (rank >= 1) {
      const int64_t len = rank == 3 ? 4 : 5;
      std::vector<float> v(len, 1.0f);
      AllreduceOptions ao;
      ao.process_set = 1;
      Status s = Allreduce("mismatch", MakeTensor(v.data(), DataType::kFloat32, len),
                           MakeTensor(v.data(), DataType::kFloat32, len), ao);
      HVD_RETURN_IF_ERROR(ExpectError("shape mismatch in a set", s, StatusCode::kAborted,
                                      {"mismatch", "rank 1", "rank 2", "rank 3", "[4]", "[5]"}));
      HVD_RETURN_IF_ERROR(
          Check(!Contains(s.message(), "rank 0 "), "set ranks in the message: " + s.message()));
      // Roots differing per rank, given as job ranks.
      Status b =
          Broadcast("roots", MakeTensor(v.data(), DataType::kFloat32, 4), rank == 3 ? 3 : 2, 1);
      HVD_RETURN_IF_ERROR(Check(!b.ok() && Contains(b.message(), "rank 3"),
                                "root mismatch in a set: " + b.ToString()));
      // The set goes on afterwards.
      std::vector<int32_t> c(3, rank);
      AllreduceOptions so = testing::Sum();
      so.process_set = 1;
      HVD_RETURN_IF_ERROR(Allreduce("after", MakeTensor(c.data(), DataType::kInt32, 3),
                                    MakeTensor(c.data(), DataType::kInt32, 3), so));
      HVD_RETURN_IF_ERROR(ExpectEqual("after the mismatches", c, std::vector<int32_t>(3, 6)));
    }
    return BarrierAndShutdown();
  });
  HVD_EXPECT_RANKS_OK(res);
}

// ---- Dynamic sets -----------------------------------------------------------------------------

TEST(DynamicSets, AddRemoveAndErrorsOnEveryRank) {
  auto res = RunSets(4, [](int rank, int size, const std::string& dir) -> Status {
    InitOptions o;
    o.dynamic_process_sets = true;
    HVD_RETURN_IF_ERROR(InitRankWith(rank, size, dir, o));
    HVD_RETURN_IF_ERROR(CheckTable(rank, {}, size));
    int a = -1, b = -1;
    HVD_RETURN_IF_ERROR(AddProcessSet({1, 0}, &a));
    // Operations in flight in one set while the job adds another.
    std::vector<int64_t> inflight(3, rank);
    Handle busy;
    if (rank <= 1) {
      AllreduceOptions s = testing::Sum();
      s.process_set = a;
      busy = AllreduceAsync("busy", MakeTensor(inflight.data(), DataType::kInt64, 3),
                            MakeTensor(inflight.data(), DataType::kInt64, 3), s);
    }
    HVD_RETURN_IF_ERROR(AddProcessSet({3, 2, 1}, &b));
    if (busy.valid()) {
      HVD_RETURN_IF_ERROR(busy.Wait());
      HVD_RETURN_IF_ERROR(ExpectEqual("busy", inflight, std::vector<int64_t>(3, 1)));
    }
    HVD_RETURN_IF_ERROR(Check(
        a >= 1 && b > a, "ids " + std::to_string(a) + ", " + std::to_string(b) + " must increase"));
    std::vector<int64_t> ids;
    HVD_RETURN_IF_ERROR(GatherAll("ids", a * 1000 + b, &ids));
    HVD_RETURN_IF_ERROR(
        ExpectEqual("ids on every rank", ids, std::vector<int64_t>(4, a * 1000 + b)));
    HVD_RETURN_IF_ERROR(CheckTable(rank, {{0, 1}, {1, 2, 3}}, size));
    HVD_RETURN_IF_ERROR(SumInEverySet(rank, "sum"));

    // Errors, the same on every rank, and none hangs.
    int id = -7;
    HVD_RETURN_IF_ERROR(ExpectError("existing ranks", AddProcessSet({0, 1}, &id),
                                    StatusCode::kAlreadyExists,
                                    {"[0, 1]", "id " + std::to_string(a)}));
    HVD_RETURN_IF_ERROR(Check(id == -7, "a failed add must not write the id"));
    HVD_RETURN_IF_ERROR(ExpectError("every rank: the global set", AddProcessSet({3, 2, 1, 0}, &id),
                                    StatusCode::kAlreadyExists, {"id 0"}));
    HVD_RETURN_IF_ERROR(ExpectError("rank out of range", AddProcessSet({0, 4}, &id),
                                    StatusCode::kInvalidArgument, {"4"}));
    HVD_RETURN_IF_ERROR(ExpectError("negative rank", AddProcessSet({-1, 2}, &id),
                                    StatusCode::kInvalidArgument, {"-1"}));
    HVD_RETURN_IF_ERROR(ExpectError("duplicate rank", AddProcessSet({2, 0, 2}, &id),
                                    StatusCode::kInvalidArgument, {"2", "twice"}));
    HVD_RETURN_IF_ERROR(ExpectError("empty set", AddProcessSet({}, &id),
                                    StatusCode::kInvalidArgument, {"at least one rank"}));
    // Mismatched calls: rank 0 passes [0, 1, 2], rank 1 [0, 2], the others [0, 3].
    const std::vector<int> mine = rank == 0   ? std::vector<int>{0, 1, 2}
                                  : rank == 1 ? std::vector<int>{2, 0}
                                              : std::vector<int>{0, 3};
    Status s = AddProcessSet(mine, &id);
    HVD_RETURN_IF_ERROR(Check(!s.ok(), "mismatched AddProcessSet succeeded"));
    for (const char* part : {"rank 0", "[0, 1, 2]", "rank 1", "[0, 2]", "rank 3", "[0, 3]"}) {
      HVD_RETURN_IF_ERROR(
          Check(Contains(s.message(), part),
                "mismatch error lacks '" + std::string(part) + "': " + s.ToString()));
    }
    s = RemoveProcessSet(rank == 2 ? a : b);
    HVD_RETURN_IF_ERROR(Check(!s.ok() && Contains(s.message(), "rank 2"),
                              "mismatched RemoveProcessSet: " + s.ToString()));
    HVD_RETURN_IF_ERROR(ExpectError("remove the global set", RemoveProcessSet(0),
                                    StatusCode::kInvalidArgument, {"global"}));
    HVD_RETURN_IF_ERROR(ExpectError("remove an unknown set", RemoveProcessSet(b + 10),
                                    StatusCode::kNotFound, {std::to_string(b + 10)}));
    HVD_RETURN_IF_ERROR(CheckTable(rank, {{0, 1}, {1, 2, 3}}, size));
    HVD_RETURN_IF_ERROR(SumInEverySet(rank, "sum"));

    // Remove, then add the same ranks again: a new id.
    HVD_RETURN_IF_ERROR(RemoveProcessSet(a));
    HVD_RETURN_IF_ERROR(ExpectEqual("ids after removal", ProcessSetIds(), std::vector<int>{0, b}));
    std::vector<int> none;
    HVD_RETURN_IF_ERROR(ExpectError("ranks of a removed set", ProcessSetRanks(a, &none),
                                    StatusCode::kNotFound, {std::to_string(a)}));
    HVD_RETURN_IF_ERROR(
        Check(!ProcessSetIncluded(a) && ProcessSetSize(a) == -1 && ProcessSetRank(a) == -1,
              "a removed set must be gone"));
    {
      std::vector<float> v(2, 1.0f);
      AllreduceOptions ro;
      ro.process_set = a;
      Status gone = Allreduce("gone", MakeTensor(v.data(), DataType::kFloat32, 2),
                              MakeTensor(v.data(), DataType::kFloat32, 2), ro);
      HVD_RETURN_IF_ERROR(Check(!gone.ok() && Contains(gone.message(), std::to_string(a)),
                                "allreduce in a removed set: " + gone.ToString()));
    }
    HVD_RETURN_IF_ERROR(ExpectError("remove twice", RemoveProcessSet(a), StatusCode::kNotFound,
                                    {std::to_string(a)}));
    int again = -1;
    HVD_RETURN_IF_ERROR(AddProcessSet({0, 1}, &again));
    HVD_RETURN_IF_ERROR(Check(again > b, "re-added set got id " + std::to_string(again) +
                                             ", want a new one above " + std::to_string(b)));
    HVD_RETURN_IF_ERROR(
        ExpectEqual("ids after re-adding", ProcessSetIds(), std::vector<int>{0, b, again}));
    HVD_RETURN_IF_ERROR(SumInEverySet(rank, "sum"));
    return BarrierAndShutdown();
  });
  HVD_EXPECT_RANKS_OK(res);
}

TEST(DynamicSets, PendingOperationsFailWhenTheirSetIsRemoved) {
  auto res = RunSets(4, [](int rank, int size, const std::string& dir) -> Status {
    InitOptions o;
    o.dynamic_process_sets = true;
    HVD_RETURN_IF_ERROR(InitRankWith(rank, size, dir, o));
    int id = -1;
    HVD_RETURN_IF_ERROR(AddProcessSet({1, 2, 3}, &id));
    // Rank 1 submits an allreduce the other members never submit; rank 2 an allgather.
    std::vector<float> v(6, 1.0f);
    Tensor t = MakeTensor(v.data(), DataType::kFloat32, 6);
    Handle orphan;
    bool callback_ran = false;
    Status callback_status;
    if (rank == 1) {
      AllreduceOptions ao;
      ao.process_set = id;
      ao.callback = [&](const Status& s) {
        callback_ran = true;
        callback_status = s;
      };
      orphan = AllreduceAsync("orphan", t, t, ao);
    } else if (rank == 2) {
      orphan = AllgatherAsync("orphan.gather", t, {}, id);
    }
    HVD_RETURN_IF_ERROR(Barrier());  // the orphans have reached their set's negotiation
    HVD_RETURN_IF_ERROR(Check(!orphan.valid() || !orphan.Ready(), "the orphan completed"));
    HVD_RETURN_IF_ERROR(RemoveProcessSet(id));
    if (orphan.valid()) {
      Status s = orphan.Wait();
      HVD_RETURN_IF_ERROR(ExpectError("pending operation of a removed set", s, StatusCode::kAborted,
                                      {"process set " + std::to_string(id), "removed"}));
    }
    if (rank == 1) {
      HVD_RETURN_IF_ERROR(Check(callback_ran && callback_status.code() == StatusCode::kAborted,
                                "the orphan's callback: " + callback_status.ToString()));
    }
    // The job goes on; the name is free again in a new set of the same ranks.
    int id2 = -1;
    HVD_RETURN_IF_ERROR(AddProcessSet({1, 2, 3}, &id2));
    if (rank >= 1) {
      std::vector<float> w(6, static_cast<float>(rank));
      AllreduceOptions ao = testing::Sum();
      ao.process_set = id2;
      HVD_RETURN_IF_ERROR(Allreduce("orphan", MakeTensor(w.data(), DataType::kFloat32, 6),
                                    MakeTensor(w.data(), DataType::kFloat32, 6), ao));
      HVD_RETURN_IF_ERROR(ExpectEqual("after re-adding", w, std::vector<float>(6, 6.0f)));
    }
    HVD_RETURN_IF_ERROR(SumInEverySet(rank, "sum"));
    return BarrierAndShutdown();
  });
  HVD_EXPECT_RANKS_OK(res);
}

TEST(DynamicSets, ShutdownFailsPendingOperationsOfEverySet) {
  auto res = RunSets(3, [](int rank, int size, const std::string& dir) -> Status {
    InitOptions o;
    o.dynamic_process_sets = true;
    HVD_RETURN_IF_ERROR(InitRankWith(rank, size, dir, o));
    int id = -1;
    HVD_RETURN_IF_ERROR(AddProcessSet({1, 2}, &id));
    std::vector<float> v(4, 1.0f);
    Handle h;
    if (rank == 1) {  // rank 2 never submits it
      AllreduceOptions ao;
      ao.process_set = id;
      h = AllreduceAsync("never", MakeTensor(v.data(), DataType::kFloat32, 4),
                         MakeTensor(v.data(), DataType::kFloat32, 4), ao);
    }
    HVD_RETURN_IF_ERROR(Barrier());
    if (rank == 0) return Shutdown();
    if (h.valid()) {
      HVD_RETURN_IF_ERROR(ExpectError("pending in a set when rank 0 shut down", h.Wait(),
                                      StatusCode::kAborted, {"shut down"}));
    }
    Shutdown();
    return Status::OK();
  });
  HVD_EXPECT_RANKS_OK(res);
}

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
    if (rank <= 1) {  // set A: rank 0 waits for rank 1, which comes 2 s late
      if (rank == 1) std::this_thread::sleep_for(std::chrono::seconds(2));
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
    const int64_t ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
    std::vector<int64_t> all;
    HVD_RETURN_IF_ERROR(GatherAll("times", ms, &all));
    const std::string times = "A took " + std::to_string(all[0]) + "/" + std::to_string(all[1]) +
                              " ms, B " + std::to_string(all[2]) + "/" + std::to_string(all[3]) +
                              " ms";
    HVD_RETURN_IF_ERROR(
        Check(all[0] >= 1900, "set A finished before its late rank came: " + times));
    HVD_RETURN_IF_ERROR(Check(std::max(all[2], all[3]) < std::min(all[0], all[1]),
                              "set B waited for set A: " + times));
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
    const auto start = Clock::now();
    if (rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    for (int i = 0; i < 3; ++i) HVD_RETURN_IF_ERROR(Barrier(set));
    const int64_t ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
    std::vector<int64_t> all;
    HVD_RETURN_IF_ERROR(GatherAll("t", ms, &all));
    HVD_RETURN_IF_ERROR(
        Check(all[0] >= 280 && all[1] >= 280,
              "set 1's barrier returned before rank 1 came: " + std::to_string(all[0]) + " ms"));
    HVD_RETURN_IF_ERROR(Check(std::max(all[2], all[3]) < std::min(all[0], all[1]),
                              "set 2's barrier waited for set 1"));
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

// ---- Grouped and byte collectives -------------------------------------------------------------

TEST(Grouped, AllgatherWithZeroSizedAndUnevenMembers) {
  auto res = RunSets(4, [](int rank, int size, const std::string& dir) -> Status {
    InitOptions o;
    o.process_sets = {{1, 2, 3}};
    HVD_RETURN_IF_ERROR(InitRankWith(rank, size, dir, o));
    for (int id : MySets()) {
      std::vector<int> members;
      HVD_RETURN_IF_ERROR(ProcessSetRanks(id, &members));
      const int m = static_cast<int>(members.size());
      for (int it = 0; it < 3; ++it) {  // rows change per iteration under one group name
        const std::string what = "set " + std::to_string(id) + " iteration " + std::to_string(it);
        auto rows0 = [&](int r) { return static_cast<int64_t>((r + it) % 3); };  // 0 on some
        std::vector<int32_t> a(rows0(rank) * 2);
        for (size_t i = 0; i < a.size(); ++i) a[i] = rank * 100 + static_cast<int>(i) + it;
        std::vector<float> b;  // [0, 3] everywhere
        std::vector<int64_t> c(rank + 1);
        for (size_t i = 0; i < c.size(); ++i) c[i] = rank * 10 + static_cast<int64_t>(i);
        Handle h = GroupedAllgatherAsync("group",
                                         {Tensor{a.data(), DataType::kInt32, {rows0(rank), 2}},
                                          Tensor{b.data(), DataType::kFloat32, {0, 3}},
                                          Tensor{c.data(), DataType::kInt64, {rank + 1}}},
                                         {}, id);
        HVD_RETURN_IF_ERROR(h.Wait().WithContext(what));
        HVD_RETURN_IF_ERROR(Check(h.output_count() == 3,
                                  what + ": output_count " + std::to_string(h.output_count())));
        std::vector<int32_t> wa;
        std::vector<int64_t> wc, sa, sb(m, 0), sc;
        for (int r : members) {
          sa.push_back(rows0(r));
          for (int i = 0; i < rows0(r) * 2; ++i) wa.push_back(r * 100 + i + it);
          sc.push_back(r + 1);
          for (int i = 0; i <= r; ++i) wc.push_back(r * 10 + i);
        }
        const int32_t* pa = static_cast<const int32_t*>(h.output_data(0));
        HVD_RETURN_IF_ERROR(ExpectEqual(what + " tensor 0",
                                        std::vector<int32_t>(pa, pa + h.output_bytes(0) / 4), wa));
        HVD_RETURN_IF_ERROR(ExpectEqual(what + " splits 0", h.output_splits(0), sa));
        HVD_RETURN_IF_ERROR(
            Check(h.output_shape(0) == std::vector<int64_t>{static_cast<int64_t>(wa.size() / 2), 2},
                  what + " shape 0"));
        HVD_RETURN_IF_ERROR(
            Check(h.output_bytes(1) == 0 && h.output_shape(1) == std::vector<int64_t>{0, 3},
                  what + " tensor 1 must be [0, 3]"));
        HVD_RETURN_IF_ERROR(ExpectEqual(what + " splits 1", h.output_splits(1), sb));
        const int64_t* pc = static_cast<const int64_t*>(h.output_data(2));
        HVD_RETURN_IF_ERROR(ExpectEqual(what + " tensor 2",
                                        std::vector<int64_t>(pc, pc + h.output_bytes(2) / 8), wc));
        HVD_RETURN_IF_ERROR(ExpectEqual(what + " splits 2", h.output_splits(2), sc));
        HVD_RETURN_IF_ERROR(
            Check(h.output_shape(2) == std::vector<int64_t>{static_cast<int64_t>(wc.size())},
                  what + " shape 2"));
      }
    }
    return BarrierAndShutdown();
  });
  HVD_EXPECT_RANKS_OK(res);
}

TEST(Grouped, ReducescatterWithZeroSizedMembersScalesAndAverage) {
  auto res = RunSets(4, [](int rank, int size, const std::string& dir) -> Status {
    InitOptions o;
    o.process_sets = {{1, 2, 3}};
    HVD_RETURN_IF_ERROR(InitRankWith(rank, size, dir, o));
    for (int id : MySets()) {
      std::vector<int> members;
      HVD_RETURN_IF_ERROR(ProcessSetRanks(id, &members));
      const int m = static_cast<int>(members.size());
      const int k = IndexOf(members, rank);
      auto shares_of = [&](int64_t rows) {
        std::vector<int64_t> s(m);
        for (int q = 0; q < m; ++q) s[q] = rows / m + (q < rows % m ? 1 : 0);
        return s;
      };
      struct Case {
        ReduceOp op;
        double prescale, postscale;
      };
      for (const Case& c : {Case{ReduceOp::kSum, 1, 1}, Case{ReduceOp::kSum, 3, 0.5},
                            Case{ReduceOp::kAverage, 1, 1}, Case{ReduceOp::kAverage, 3, 0.5}}) {
        const std::string what = "set " + std::to_string(id) + " " + ReduceOpName(c.op).data() +
                                 " prescale " + std::to_string(c.prescale) + " postscale " +
                                 std::to_string(c.postscale);
        // t0: float32 [5, 2]; t1: int32 [0, 4]; t2: float64 [2] (fewer rows than ranks);
        // t3: int32 [7].
        std::vector<float> a(10);
        for (int i = 0; i < 10; ++i) a[i] = static_cast<float>(rank * 10 + i);
        std::vector<int32_t> b;
        std::vector<double> d = {static_cast<double>(rank), static_cast<double>(2 * rank)};
        std::vector<int32_t> e(7);
        for (int i = 0; i < 7; ++i) e[i] = rank + i;
        AllreduceOptions ao;
        ao.op = c.op;
        ao.prescale = c.prescale;
        ao.postscale = c.postscale;
        ao.process_set = id;
        Handle h = GroupedReducescatterAsync(
            "rs",
            {Tensor{a.data(), DataType::kFloat32, {5, 2}},
             Tensor{b.data(), DataType::kInt32, {0, 4}}, Tensor{d.data(), DataType::kFloat64, {2}},
             Tensor{e.data(), DataType::kInt32, {7}}},
            ao);
        HVD_RETURN_IF_ERROR(h.Wait().WithContext(what));
        HVD_RETURN_IF_ERROR(Check(h.output_count() == 4,
                                  what + ": output_count " + std::to_string(h.output_count())));
        const double factor = c.postscale / (c.op == ReduceOp::kAverage ? m : 1);
        // Sums of prescaled inputs (integers: exact), then the factor as Scale applies it.
        auto sum_of = [&](auto value) {
          double s = 0;
          for (int r : members) s += c.prescale * value(r);
          return s;
        };
        // t0
        {
          auto sh = shares_of(5);
          int64_t first = 0;
          for (int q = 0; q < k; ++q) first += sh[q];
          std::vector<float> want;
          for (int64_t i = first * 2; i < (first + sh[k]) * 2; ++i) {
            const double s = sum_of([&](int r) { return r * 10 + i; });
            want.push_back(factor == 1 ? static_cast<float>(s)
                                       : static_cast<float>(s) * static_cast<float>(factor));
          }
          const float* p = static_cast<const float*>(h.output_data(0));
          HVD_RETURN_IF_ERROR(
              ExpectEqual(what + " t0", std::vector<float>(p, p + h.output_bytes(0) / 4), want));
          HVD_RETURN_IF_ERROR(ExpectEqual(what + " t0 splits", h.output_splits(0), sh));
          HVD_RETURN_IF_ERROR(
              Check(h.output_shape(0) == std::vector<int64_t>{sh[k], 2}, what + " t0 shape"));
        }
        // t1
        HVD_RETURN_IF_ERROR(
            Check(h.output_bytes(1) == 0 && h.output_shape(1) == std::vector<int64_t>{0, 4},
                  what + " t1 must be [0, 4]"));
        HVD_RETURN_IF_ERROR(
            ExpectEqual(what + " t1 splits", h.output_splits(1), std::vector<int64_t>(m, 0)));
        // t2
        {
          auto sh = shares_of(2);
          int64_t first = 0;
          for (int q = 0; q < k; ++q) first += sh[q];
          std::vector<double> want;
          for (int64_t i = first; i < first + sh[k]; ++i) {
            want.push_back(sum_of([&](int r) { return (i + 1.0) * r; }) * factor);
          }
          const double* p = static_cast<const double*>(h.output_data(2));
          HVD_RETURN_IF_ERROR(
              ExpectEqual(what + " t2", std::vector<double>(p, p + h.output_bytes(2) / 8), want));
          HVD_RETURN_IF_ERROR(ExpectEqual(what + " t2 splits", h.output_splits(2), sh));
          HVD_RETURN_IF_ERROR(
              Check(h.output_shape(2) == std::vector<int64_t>{sh[k]}, what + " t2 shape"));
        }
        // t3
        {
          auto sh = shares_of(7);
          int64_t first = 0;
          for (int q = 0; q < k; ++q) first += sh[q];
          std::vector<int32_t> want;
          for (int64_t i = first; i < first + sh[k]; ++i) {
            const double s = sum_of([&](int r) { return static_cast<double>(r + i); });
            want.push_back(static_cast<int32_t>(
                std::roundl(static_cast<long double>(s) * static_cast<long double>(factor))));
          }
          const int32_t* p = static_cast<const int32_t*>(h.output_data(3));
          HVD_RETURN_IF_ERROR(
              ExpectEqual(what + " t3", std::vector<int32_t>(p, p + h.output_bytes(3) / 4), want));
          HVD_RETURN_IF_ERROR(ExpectEqual(what + " t3 splits", h.output_splits(3), sh));
        }
      }
    }
    return BarrierAndShutdown();
  });
  HVD_EXPECT_RANKS_OK(res);
}

TEST(Bytes, AllgatherBytesOfDifferentLengths) {
  auto res = RunSets(4, [](int rank, int size, const std::string& dir) -> Status {
    InitOptions o;
    o.process_sets = {{1, 2, 3}};
    HVD_RETURN_IF_ERROR(InitRankWith(rank, size, dir, o));
    for (int id : MySets()) {
      std::vector<int> members;
      HVD_RETURN_IF_ERROR(ProcessSetRanks(id, &members));
      for (int it = 0; it < 3; ++it) {
        auto len = [&](int r) { return static_cast<size_t>(((r + it) % 3) * 5); };  // 0 on some
        std::string mine(len(rank), '\0');
        for (size_t i = 0; i < mine.size(); ++i) mine[i] = static_cast<char>('a' + rank + i);
        Handle h = AllgatherBytesAsync("pickle", mine.empty() ? nullptr : mine.data(), mine.size(),
                                       {}, id);
        const std::string what = "set " + std::to_string(id) + " iteration " + std::to_string(it);
        HVD_RETURN_IF_ERROR(h.Wait().WithContext(what));
        std::string want;
        std::vector<int64_t> splits;
        for (int r : members) {
          splits.push_back(static_cast<int64_t>(len(r)));
          for (size_t i = 0; i < len(r); ++i) want += static_cast<char>('a' + r + i);
        }
        const std::string got(static_cast<const char*>(h.output_data()), h.output_bytes());
        HVD_RETURN_IF_ERROR(Check(got == want, what + ": got '" + got + "', want '" + want + "'"));
        HVD_RETURN_IF_ERROR(ExpectEqual(what + " splits", h.output_splits(), splits));
      }
    }
    return BarrierAndShutdown();
  });
  HVD_EXPECT_RANKS_OK(res);
}

TEST(Bytes, BroadcastBytesSizedByTheRoot) {
  auto res = RunSets(4, [](int rank, int size, const std::string& dir) -> Status {
    InitOptions o;
    o.process_sets = {{1, 2, 3}};
    HVD_RETURN_IF_ERROR(InitRankWith(rank, size, dir, o));
    for (int id : MySets()) {
      std::vector<int> members;
      HVD_RETURN_IF_ERROR(ProcessSetRanks(id, &members));
      // One name, sizes changing call to call (no stale cached size), roots changing too.
      const size_t sizes[] = {0, 1, 100000, 100000, 1, 0, 7};
      for (size_t c = 0; c < std::size(sizes); ++c) {
        const size_t n = sizes[c];
        const int root = members[c % members.size()];
        std::string data;
        if (rank == root) {
          data.resize(n);
          for (size_t i = 0; i < n; ++i) data[i] = static_cast<char>((i * 7 + c + root) & 0xff);
        }
        // The others pass nothing, or something of another size: only the root's counts.
        std::string junk(c % 2 ? 3 : 0, 'x');
        Handle h = rank == root ? BroadcastBytesAsync("obj", data.data(), n, root, {}, id)
                                : BroadcastBytesAsync("obj", c % 2 ? junk.data() : nullptr,
                                                      junk.size(), root, {}, id);
        const std::string what = "set " + std::to_string(id) + " call " + std::to_string(c) + " (" +
                                 std::to_string(n) + " bytes from " + std::to_string(root) + ")";
        HVD_RETURN_IF_ERROR(h.Wait().WithContext(what));
        if (rank != root) {
          HVD_RETURN_IF_ERROR(
              Check(h.output_count() == 1 && h.output_bytes() == n,
                    what + ": received " + std::to_string(h.output_bytes()) + " bytes"));
          std::string want(n, '\0');
          for (size_t i = 0; i < n; ++i) want[i] = static_cast<char>((i * 7 + c + root) & 0xff);
          const std::string got(static_cast<const char*>(h.output_data()), h.output_bytes());
          HVD_RETURN_IF_ERROR(Check(got == want, what + ": wrong bytes"));
          HVD_RETURN_IF_ERROR(Check(
              h.output_shape() == std::vector<int64_t>{static_cast<int64_t>(n)}, what + ": shape"));
        }
      }
      // A root outside the set is refused.
      if (id != 0) {
        Status s = BroadcastBytesAsync("obj", nullptr, 0, 0, {}, id).Wait();
        HVD_RETURN_IF_ERROR(ExpectError("byte broadcast from outside root", s,
                                        StatusCode::kInvalidArgument, {"root"}));
      }
    }
    // The root's error (null data) is reported through the callback too.
    if (rank == 0) {
      bool called = false;
      Handle h = BroadcastBytesAsync("bad", nullptr, 5, 0, [&](const Status&) { called = true; });
      HVD_RETURN_IF_ERROR(ExpectError("null bytes", h.Wait(), StatusCode::kInvalidArgument));
      HVD_RETURN_IF_ERROR(Check(called, "the callback of a refused byte broadcast never ran"));
    }
    return BarrierAndShutdown();
  });
  HVD_EXPECT_RANKS_OK(res);
}

// ---- Adasum -----------------------------------------------------------------------------------

std::vector<double> AdasumPair(const std::vector<double>& a, const std::vector<double>& b) {
  double dot = 0, na = 0, nb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    dot += a[i] * b[i];
    na += a[i] * a[i];
    nb += b[i] * b[i];
  }
  const double ca = na >= 1e-8 ? 1 - dot / na * 0.5 : 1;
  const double cb = nb >= 1e-8 ? 1 - dot / nb * 0.5 : 1;
  std::vector<double> out(a.size());
  for (size_t i = 0; i < a.size(); ++i) out[i] = ca * a[i] + cb * b[i];
  return out;
}

// The tree of collectives/adasum.cc over x (indexed by set rank).
std::vector<double> AdasumReference(std::vector<std::vector<double>> x) {
  const int n = static_cast<int>(x.size());
  int p = 1;
  while (p * 2 <= n) p *= 2;
  for (int i = 0; i < n - p; ++i) x[i] = AdasumPair(x[i], x[i + p]);
  for (int d = 1; d < p; d *= 2) {
    for (int g = 0; g + d < p; g += 2 * d) x[g] = AdasumPair(x[g], x[g + d]);
  }
  return x[0];
}

double AdasumInput(int rank, int i, int salt) {
  // Neither parallel nor orthogonal: a shared direction plus a per-rank one.
  return std::sin(0.7 * i + salt) + 0.5 * std::cos(1.3 * i * (rank + 1) + rank) + 0.1 * rank;
}

Status RunAdasum(int rank) {
  for (int id : MySets()) {
    std::vector<int> members;
    HVD_RETURN_IF_ERROR(ProcessSetRanks(id, &members));
    for (DataType dt :
         {DataType::kFloat64, DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16}) {
      for (int it = 0; it < 2; ++it) {
        const int n = 37;
        const int salt = it + static_cast<int>(dt);
        std::vector<char> buf(n * DataTypeSize(dt));
        for (int i = 0; i < n; ++i) Put(dt, buf.data(), i, AdasumInput(rank, i, salt));
        std::vector<std::vector<double>> xs;
        for (int r : members) {
          std::vector<double> x(n);
          // The reference starts from the values as the dtype holds them.
          for (int i = 0; i < n; ++i) {
            std::vector<char> one(8);
            Put(dt, one.data(), 0, AdasumInput(r, i, salt));
            x[i] = Get(dt, one.data(), 0);
          }
          xs.push_back(std::move(x));
        }
        const std::vector<double> want = AdasumReference(xs);
        AllreduceOptions ao;
        ao.op = ReduceOp::kAdasum;
        ao.process_set = id;
        Tensor t = MakeTensor(buf.data(), dt, n);
        const std::string what = "adasum " + std::string(DataTypeName(dt)) + " in set " +
                                 std::to_string(id) + " iteration " + std::to_string(it);
        HVD_RETURN_IF_ERROR(
            Allreduce("adasum." + std::string(DataTypeName(dt)), t, t, ao).WithContext(what));
        double scale = 0;
        for (double w : want) scale = std::max(scale, std::abs(w));
        const double tol = dt == DataType::kFloat64   ? 1e-12
                           : dt == DataType::kFloat32 ? 1e-5
                           : dt == DataType::kFloat16 ? 1e-2
                                                      : 4e-2;
        for (int i = 0; i < n; ++i) {
          const double got = Get(dt, buf.data(), i);
          if (!(std::abs(got - want[i]) <= tol * std::max(1.0, scale))) {
            return Internal(what + ": element " + std::to_string(i) + " is " + std::to_string(got) +
                            ", want " + std::to_string(want[i]));
          }
        }
      }
    }
    // A grouped Adasum combines each tensor on its own (its own dot products and norms), with
    // prescale and postscale around it (Adasum is homogeneous: the result scales by both).
    {
      const std::vector<int> counts = {13, 0, 5};
      std::vector<std::vector<double>> bufs;
      std::vector<Tensor> ts;
      for (size_t j = 0; j < counts.size(); ++j) {
        std::vector<double>& b = bufs.emplace_back(counts[j]);
        for (int i = 0; i < counts[j]; ++i) b[i] = AdasumInput(rank, i, 40 + static_cast<int>(j));
      }
      for (auto& b : bufs) {
        ts.push_back(MakeTensor(b.data(), DataType::kFloat64, static_cast<int64_t>(b.size())));
      }
      AllreduceOptions ao;
      ao.op = ReduceOp::kAdasum;
      ao.prescale = 2;
      ao.postscale = 0.25;
      ao.process_set = id;
      HVD_RETURN_IF_ERROR(GroupedAllreduce("adasum.group", ts, ts, ao));
      for (size_t j = 0; j < counts.size(); ++j) {
        std::vector<std::vector<double>> xs;
        for (int r : members) {
          std::vector<double> x(counts[j]);
          for (int i = 0; i < counts[j]; ++i) x[i] = AdasumInput(r, i, 40 + static_cast<int>(j));
          xs.push_back(std::move(x));
        }
        const std::vector<double> want = AdasumReference(xs);
        for (int i = 0; i < counts[j]; ++i) {
          if (!(std::abs(bufs[j][i] - 0.5 * want[i]) <= 1e-12)) {
            return Internal("grouped adasum in set " + std::to_string(id) + ": tensor " +
                            std::to_string(j) + " element " + std::to_string(i) + " is " +
                            std::to_string(bufs[j][i]) + ", want " + std::to_string(0.5 * want[i]));
          }
        }
      }
    }
    // Adasum is for floating-point allreduces only.
    std::vector<int32_t> iv(4, 1);
    AllreduceOptions ao;
    ao.op = ReduceOp::kAdasum;
    ao.process_set = id;
    Tensor it = MakeTensor(iv.data(), DataType::kInt32, 4);
    Handle h = AllreduceAsync("adasum.int", it, it, ao);
    HVD_RETURN_IF_ERROR(Check(h.Ready(), "adasum on int32 must fail at once"));
    HVD_RETURN_IF_ERROR(
        ExpectError("adasum on int32", h.Wait(), StatusCode::kInvalidArgument, {"int32"}));
    std::vector<float> fv(4, 1.0f);
    h = ReducescatterAsync("adasum.rs", MakeTensor(fv.data(), DataType::kFloat32, 4), ao);
    HVD_RETURN_IF_ERROR(Check(h.Ready(), "adasum reducescatter must fail at once"));
    HVD_RETURN_IF_ERROR(
        ExpectError("adasum reducescatter", h.Wait(), StatusCode::kInvalidArgument, {"adasum"}));
  }
  return Status::OK();
}

class Adasum : public ::testing::TestWithParam<int> {};

TEST_P(Adasum, MatchesTheTreeGloballyAndInASet) {
  auto res = RunSets(GetParam(), [](int rank, int size, const std::string& dir) -> Status {
    InitOptions o;
    std::vector<int> tail(size - 1);
    std::iota(tail.begin(), tail.end(), 1);
    o.process_sets = {tail};  // 4 ranks: {1, 2, 3}, not a power of two
    HVD_RETURN_IF_ERROR(InitRankWith(rank, size, dir, o));
    HVD_RETURN_IF_ERROR(RunAdasum(rank));
    return BarrierAndShutdown();
  });
  HVD_EXPECT_RANKS_OK(res);
}

INSTANTIATE_TEST_SUITE_P(Ranks, Adasum, ::testing::Values(2, 4),
                         [](const auto& info) { return std::to_string(info.param) + "ranks"; });

}  // namespace
}  // namespace hvd
