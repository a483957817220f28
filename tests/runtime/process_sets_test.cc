// Process sets through the public API (hvd.h, "Process sets"), every rank its own process: static
// sets (InitOptions, HVD_PROCESS_SETS) and dynamic ones (AddProcessSet/RemoveProcessSet), the
// query functions, the errors of every call on every rank, pending operations of a removed set.
// The other process-set suites: process_sets_{concurrent,collectives,grouped}_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "process_sets_harness.h"

namespace hvd {
namespace {

using testing::Check;
using testing::Contains;
using testing::ExpectEqual;
using testing::InitRank;
using testing::InitRankWith;
using testing::sets::BarrierAndShutdown;
using testing::sets::CheckTable;
using testing::sets::ExpectError;
using testing::sets::GatherAll;
using testing::sets::RanksText;
using testing::sets::RunSets;
using testing::sets::SumInEverySet;

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
      // The message says which: never initialized, or shut down.
      const std::string said = AddProcessSet({0}, &id).message();
      const std::string want = when == "before Init"
                                   ? "hvd is not initialized; call hvd::Init() first"
                                   : "hvd was shut down (hvd::Shutdown()); call hvd::Init() again";
      HVD_RETURN_IF_ERROR(Check(said.find(want) != std::string::npos, when + ": " + said));
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

}  // namespace
}  // namespace hvd
