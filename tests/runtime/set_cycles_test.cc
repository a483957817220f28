// Process sets running cycles of their own between global rounds (core/engine.h, "stay in
// set"): a busy set must not need the whole job for each operation, and sets that overlap must
// never wait on each other in a circle, whatever order their members submit in.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "core/context.h"
#include "runtime_env.h"
#include "testutil/multiproc.h"

namespace hvd {
namespace {

using testing::Check;
using testing::ExpectEqual;
using testing::InitRankWith;
using testing::RunOptions;
using testing::RunRanks;

RunOptions Opts() {
  RunOptions o;
  o.timeout = std::chrono::seconds(60);
  o.failure_grace = std::chrono::seconds(5);
  return o;
}

// Set {0, 1} runs 200 synchronous allreduces while ranks 2 and 3 only wait in a global barrier.
// With a long cycle time (50 ms) the set's members run its operations in cycles of their own
// and come back to the global round about once per tick: far fewer global rounds than
// operations. (Each operation paying a global round, the count would be at least 200.)
TEST(SetCycles, ABusySetRunsBetweenGlobalRounds) {
  auto res = RunRanks(
      4,
      [](int rank, int size, const std::string& dir) -> Status {
        InitOptions o;
        o.process_sets = {{0, 1}};
        HVD_RETURN_IF_ERROR(InitRankWith(rank, size, dir, o, {{"HVD_CYCLE_TIME", "50"}}));
        constexpr int kOps = 200;
        if (rank <= 1) {
          const auto before = runtime::core::CurrentEngineStats();
          for (int i = 0; i < kOps; ++i) {
            std::vector<int32_t> v(16, rank + i);
            AllreduceOptions ao = testing::Sum();
            ao.process_set = 1;
            HVD_RETURN_IF_ERROR(Allreduce("op", MakeTensor(v.data(), DataType::kInt32, 16),
                                          MakeTensor(v.data(), DataType::kInt32, 16), ao));
            HVD_RETURN_IF_ERROR(ExpectEqual("set sum", v, std::vector<int32_t>(16, 1 + 2 * i)));
          }
          const auto after = runtime::core::CurrentEngineStats();
          const uint64_t rounds = after.cycles - before.cycles;
          HVD_RETURN_IF_ERROR(Check(after.set_cycles > before.set_cycles,
                                    "the set ran no cycle of its own between global rounds"));
          HVD_RETURN_IF_ERROR(Check(rounds < kOps / 4,
                                    std::to_string(rounds) + " global rounds for " +
                                        std::to_string(kOps) + " operations of set {0, 1}"));
        }
        HVD_RETURN_IF_ERROR(Barrier());
        return Shutdown();
      },
      Opts());
  HVD_EXPECT_RANKS_OK(res);
}

// Four ranks, five sets that overlap in a ring ({0,1}, {1,2}, {2,3}, {0,3}) plus {0,1,2,3}; every
// rank drives each of its sets and the global set from a thread of its own, all at once, with
// short and fast cycles: the members of one set reach its cycles in different orders relative
// to their other sets. Every result must be right and nothing may hang (the harness's timeout).
TEST(SetCycles, OverlappingSetsNeverWaitInACircle) {
  auto res = RunRanks(
      4,
      [](int rank, int size, const std::string& dir) -> Status {
        InitOptions o;
        o.process_sets = {{0, 1}, {1, 2}, {2, 3}, {0, 3}, {0, 1, 2, 3}};
        HVD_RETURN_IF_ERROR(InitRankWith(rank, size, dir, o, {{"HVD_CYCLE_TIME", "0.2"}}));
        std::vector<int> mine = {0};  // the global set, then this rank's sets
        for (int id = 1; id <= 5; ++id) {
          if (ProcessSetIncluded(id)) mine.push_back(id);
        }
        std::vector<Status> results(mine.size());
        std::vector<std::thread> threads;
        for (size_t t = 0; t < mine.size(); ++t) {
          threads.emplace_back([&, t] {
            const int id = mine[t];
            const int members = ProcessSetSize(id);
            for (int i = 0; i < 60; ++i) {
              std::vector<int64_t> v(1 + (i % 7) * 100, i);
              AllreduceOptions ao = testing::Sum();
              ao.process_set = id;
              const auto n = static_cast<int64_t>(v.size());
              Status s = Allreduce("set" + std::to_string(id) + "." + std::to_string(i % 3),
                                   MakeTensor(v.data(), DataType::kInt64, n),
                                   MakeTensor(v.data(), DataType::kInt64, n), ao);
              if (s.ok()) {
                s = ExpectEqual("set " + std::to_string(id) + " op " + std::to_string(i), v,
                                std::vector<int64_t>(v.size(), int64_t{i} * members));
              }
              if (!s.ok()) {
                results[t] = s;
                return;
              }
            }
          });
        }
        for (auto& th : threads) th.join();
        for (const Status& s : results) HVD_RETURN_IF_ERROR(s);
        HVD_RETURN_IF_ERROR(Barrier());
        return Shutdown();
      },
      Opts());
  HVD_EXPECT_RANKS_OK(res);
}

}  // namespace
}  // namespace hvd
