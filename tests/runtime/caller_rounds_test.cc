// Rounds run on the caller's thread (core/engine.h, "Who runs a round"; HVD_RUN_ON_CALLER): a
// synchronous operation submitted to an idle engine runs there, with no hand-off to the
// background thread; everything else (asynchronous submissions, callbacks, other threads' sync
// calls, a peer's shutdown) must behave exactly as when the background thread runs every round.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "base/mutex.h"
#include "core/context.h"
#include "hvd/c_api.h"
#include "runtime_env.h"
#include "testutil/multiproc.h"

namespace hvd {
namespace {

using testing::Check;
using testing::Contains;
using testing::ExpectEqual;
using testing::InitRank;
using testing::RunOptions;
using testing::RunRanks;

RunOptions Opts() {
  RunOptions o;
  o.timeout = std::chrono::seconds(60);
  o.failure_grace = std::chrono::seconds(5);
  return o;
}

constexpr int kOps = 200;

// kOps synchronous allreduces; returns the rounds the caller ran in `*caller_rounds` and all
// rounds in `*rounds`.
Status SyncLoop(int rank, int size, uint64_t* caller_rounds, uint64_t* rounds) {
  const auto before = runtime::core::CurrentEngineStats();
  for (int i = 0; i < kOps; ++i) {
    std::vector<float> v(1000, static_cast<float>(rank + i));
    Tensor t = MakeTensor(v.data(), DataType::kFloat32, 1000);
    HVD_RETURN_IF_ERROR(Allreduce("sync", t, t, testing::Sum()));
    const float want = static_cast<float>(size * (size - 1) / 2 + size * i);
    HVD_RETURN_IF_ERROR(ExpectEqual("op " + std::to_string(i), v, std::vector<float>(1000, want)));
  }
  const auto after = runtime::core::CurrentEngineStats();
  *caller_rounds = after.caller_rounds - before.caller_rounds;
  *rounds = after.cycles - before.cycles;
  return Status::OK();
}

TEST(CallerRounds, SynchronousOperationsRunOnTheCallersThread) {
  auto res = RunRanks(
      2,
      [](int rank, int size, const std::string& dir) -> Status {
        HVD_RETURN_IF_ERROR(InitRank(rank, size, dir));
        uint64_t caller_rounds = 0, rounds = 0;
        HVD_RETURN_IF_ERROR(SyncLoop(rank, size, &caller_rounds, &rounds));
        // The background thread still runs a round per tick when it finds the engine idle, and
        // then takes an operation submitted meanwhile: most, not all, run on the caller.
        HVD_RETURN_IF_ERROR(Check(caller_rounds > kOps / 2,
                                  std::to_string(caller_rounds) + " of " + std::to_string(rounds) +
                                      " rounds ran on the caller's thread for " +
                                      std::to_string(kOps) + " synchronous operations"));
        return Shutdown();
      },
      Opts());
  HVD_EXPECT_RANKS_OK(res);
}

// Asynchronous operations waited for (Handle::Wait and WaitFor, as hvd.torch's synchronize()
// and a training step's gradients): the waiting thread runs their rounds instead of waiting for
// the background thread's next tick, a second away here. (The first submission of a batch wakes
// the idle background thread, whose round may take some of the batch, or on a busy host all of
// it: so at least one round in eight batches, not one per batch.)
TEST(CallerRounds, WaitingForAsynchronousOperationsRunsTheirRounds) {
  auto res = RunRanks(
      2,
      [](int rank, int size, const std::string& dir) -> Status {
        HVD_RETURN_IF_ERROR(InitRank(rank, size, dir, {{"HVD_CYCLE_TIME", "1000"}}));
        const auto before = runtime::core::CurrentEngineStats();
        constexpr int kBatches = 8, kPerBatch = 4;
        for (int b = 0; b < kBatches; ++b) {
          std::vector<std::vector<float>> data;
          std::vector<Handle> handles;
          for (int i = 0; i < kPerBatch; ++i) {
            data.emplace_back(100 + i, static_cast<float>(rank + b + i));
            auto& v = data.back();
            Tensor t = MakeTensor(v.data(), DataType::kFloat32, static_cast<int64_t>(v.size()));
            handles.push_back(AllreduceAsync("async." + std::to_string(i), t, t, testing::Sum()));
          }
          for (int i = 0; i < kPerBatch; ++i) {
            HVD_RETURN_IF_ERROR(i % 2 == 0 ? handles[i].Wait()
                                           : handles[i].WaitFor(std::chrono::seconds(60)));
            const float want = static_cast<float>(1 + 2 * (b + i));  // ranks 0 and 1
            HVD_RETURN_IF_ERROR(
                ExpectEqual("batch " + std::to_string(b) + " op " + std::to_string(i), data[i],
                            std::vector<float>(data[i].size(), want)));
          }
        }
        const auto after = runtime::core::CurrentEngineStats();
        const uint64_t caller_rounds = after.caller_rounds - before.caller_rounds;
        HVD_RETURN_IF_ERROR(Check(caller_rounds >= 1, std::to_string(caller_rounds) +
                                                                 " rounds ran on the waiting "
                                                                 "thread for " +
                                                                 std::to_string(kBatches) +
                                                                 " batches"));
        return Shutdown();
      },
      Opts());
  HVD_EXPECT_RANKS_OK(res);
}

TEST(CallerRounds, OffTheBackgroundThreadRunsEveryRound) {
  auto res = RunRanks(
      2,
      [](int rank, int size, const std::string& dir) -> Status {
        HVD_RETURN_IF_ERROR(InitRank(rank, size, dir, {{"HVD_RUN_ON_CALLER", "0"}}));
        uint64_t caller_rounds = 0, rounds = 0;
        HVD_RETURN_IF_ERROR(SyncLoop(rank, size, &caller_rounds, &rounds));
        HVD_RETURN_IF_ERROR(Check(caller_rounds == 0, std::to_string(caller_rounds) +
                                                          " rounds ran on the caller's thread "
                                                          "with HVD_RUN_ON_CALLER=0"));
        HVD_RETURN_IF_ERROR(Check(rounds >= kOps, std::to_string(rounds) + " rounds for " +
                                                      std::to_string(kOps) + " operations"));
        return Shutdown();
      },
      Opts());
  HVD_EXPECT_RANKS_OK(res);
}

// On every rank at once: a thread of synchronous allreduces, a thread of synchronous broadcasts,
// and a thread that submits batches of asynchronous allreduces whose callbacks try to block
// (an hvd::Allreduce inside a callback must fail at once, whichever thread runs the round that
// completes it). Fast ticks make the background thread and the callers trade the token often.
TEST(CallerRounds, CallersAndTheBackgroundThreadShareTheRounds) {
  auto res = RunRanks(
      3,
      [](int rank, int size, const std::string& dir) -> Status {
        HVD_RETURN_IF_ERROR(InitRank(rank, size, dir, {{"HVD_CYCLE_TIME", "0.1"}}));
        Status sync_status, bcast_status, async_status;
        std::thread sync([&] {
          for (int i = 0; i < 150 && sync_status.ok(); ++i) {
            std::vector<int64_t> v(1 + i % 5 * 300, rank + i);
            const auto n = static_cast<int64_t>(v.size());
            Tensor t = MakeTensor(v.data(), DataType::kInt64, n);
            sync_status = Allreduce("sync." + std::to_string(i % 4), t, t, testing::Sum());
            if (sync_status.ok()) {
              sync_status = ExpectEqual("sync " + std::to_string(i), v,
                                        std::vector<int64_t>(v.size(), 3 + 3 * int64_t{i}));
            }
          }
        });
        std::thread bcast([&] {
          for (int i = 0; i < 150 && bcast_status.ok(); ++i) {
            std::vector<int32_t> v(7, rank == i % size ? i : -1);
            bcast_status = Broadcast("bcast", MakeTensor(v.data(), DataType::kInt32, 7), i % size);
            if (bcast_status.ok()) {
              bcast_status =
                  ExpectEqual("broadcast " + std::to_string(i), v, std::vector<int32_t>(7, i));
            }
          }
        });
        std::thread async([&] {
          std::atomic<int> refused{0};
          for (int batch = 0; batch < 30 && async_status.ok(); ++batch) {
            std::vector<std::vector<float>> data(4, std::vector<float>(64, 1.0f));
            std::vector<Handle> handles;
            for (int j = 0; j < 4; ++j) {
              AllreduceOptions ao = testing::Sum();
              ao.callback = [&refused](const Status&) {
                float x = 0;
                Status s = Allreduce("inside", MakeTensor(&x, DataType::kFloat32, 1),
                                     MakeTensor(&x, DataType::kFloat32, 1));
                if (s.code() == StatusCode::kFailedPrecondition &&
                    Contains(s.message(), "callback")) {
                  ++refused;
                }
              };
              Tensor t = MakeTensor(data[j].data(), DataType::kFloat32, 64);
              handles.push_back(AllreduceAsync("async." + std::to_string(j), t, t, ao));
            }
            for (int j = 0; j < 4 && async_status.ok(); ++j) {
              async_status = handles[j].Wait();
              if (async_status.ok()) {
                async_status = ExpectEqual("async " + std::to_string(j), data[j],
                                           std::vector<float>(64, 3.0f));
              }
            }
          }
          if (async_status.ok() && refused.load() != 30 * 4) {
            async_status = Internal(std::to_string(refused.load()) +
                                    " of 120 blocking calls from callbacks were refused");
          }
        });
        sync.join();
        bcast.join();
        async.join();
        HVD_RETURN_IF_ERROR(sync_status.WithContext("sync thread"));
        HVD_RETURN_IF_ERROR(bcast_status.WithContext("broadcast thread"));
        HVD_RETURN_IF_ERROR(async_status.WithContext("async thread"));
        return Shutdown();
      },
      Opts());
  HVD_EXPECT_RANKS_OK(res);
}

// Rank 1 shuts down while rank 0 keeps submitting synchronous operations (rounds on its own
// thread): rank 0's next operation fails naming rank 1, and nothing hangs.
TEST(CallerRounds, APeersShutdownEndsTheCallersRounds) {
  auto res = RunRanks(
      2,
      [](int rank, int size, const std::string& dir) -> Status {
        HVD_RETURN_IF_ERROR(InitRank(rank, size, dir));
        int32_t x = 1;
        Tensor t = MakeTensor(&x, DataType::kInt32, 1);
        if (rank == 1) {
          for (int i = 0; i < 50; ++i) HVD_RETURN_IF_ERROR(Allreduce("x", t, t, testing::Sum()));
          return Shutdown();
        }
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
        for (int i = 0; i < 1000000 && std::chrono::steady_clock::now() < deadline; ++i) {
          x = 1;
          Status s = Allreduce("x", t, t, testing::Sum());
          if (s.ok()) continue;
          HVD_RETURN_IF_ERROR(Check(
              i >= 50, "failed early, at operation " + std::to_string(i) + ": " + s.ToString()));
          HVD_RETURN_IF_ERROR(Check(Contains(s.message(), "rank 1"),
                                    "the error does not name rank 1: " + s.ToString()));
          Shutdown();
          return Status::OK();
        }
        return Internal("rank 0's operations kept succeeding after rank 1 shut down");
      },
      Opts());
  HVD_EXPECT_RANKS_OK(res);
}

// hvd_run_allreduce_for (hvd.torch's synchronous allreduce) runs the rounds on the caller's thread
// for at most its timeout: with a peer 1.5 s late, it returns a pending handle in time (so that
// Python sees a Ctrl-C), and the background thread completes the operation meanwhile.
TEST(CallerRounds, RunAllreduceForReturnsInTimeWhileAPeerIsLate) {
  auto res = RunRanks(
      2,
      [](int rank, int size, const std::string& dir) -> Status {
        HVD_RETURN_IF_ERROR(InitRank(rank, size, dir));
        float x[4] = {1, 2, 3, 4};
        int64_t shape[1] = {4};
        const hvd_tensor t = {x, shape, 1, HVD_FLOAT32, -1, 0, nullptr};
        if (rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(1500));
        hvd_handle* pending = nullptr;
        const auto start = std::chrono::steady_clock::now();
        const int code = hvd_run_allreduce_for("late", &t, &t, HVD_SUM, 1.0, 1.0, 0, 100, &pending);
        const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::steady_clock::now() - start)
                            .count();
        if (rank == 0) {
          HVD_RETURN_IF_ERROR(Check(pending != nullptr && ms < 1000,
                                    "returned after " + std::to_string(ms) + " ms with " +
                                        (pending != nullptr ? "a pending handle" : "no handle") +
                                        ", code " + std::to_string(code)));
          const int waited = hvd_wait(pending);
          hvd_release(pending);
          HVD_RETURN_IF_ERROR(
              Check(waited == 0, "the pending allreduce failed: " + std::string(hvd_last_error())));
        } else if (pending != nullptr) {
          hvd_wait(pending);
          hvd_release(pending);
        }
        HVD_RETURN_IF_ERROR(Check(x[0] == 2 && x[3] == 8, "wrong sums"));
        return Shutdown();
      },
      Opts());
  HVD_EXPECT_RANKS_OK(res);
}

// While one thread runs rounds for its synchronous operations, another submits asynchronous
// operations whose callbacks submit more (allowed from callbacks): those callbacks run on the
// first thread, in its round, and their submissions must be queued, not wait for the token that
// thread holds (which stalled every rank).
TEST(CallerRounds, ACallbackSubmitsFromACallersRound) {
  auto res = RunRanks(
      2,
      [](int rank, int size, const std::string& dir) -> Status {
        HVD_RETURN_IF_ERROR(InitRank(rank, size, dir));
        constexpr int kAsync = 40;
        std::atomic<bool> async_done{false};
        Status sync_status, async_status;
        std::thread sync([&] {
          // Until some rank's asynchronous operations are done: every rank must run the same
          // number of these (a rank that stopped first would shut down under the others').
          for (int i = 0; i < 100000 && sync_status.ok(); ++i) {
            int32_t go = async_done.load() ? 0 : 1;
            Tensor t = MakeTensor(&go, DataType::kInt32, 1);
            AllreduceOptions o;
            o.op = ReduceOp::kMin;
            sync_status = Allreduce("sync", t, t, o);
            if (go == 0) break;
          }
        });
        base::Mutex mu;
        std::vector<Handle> inner;
        std::vector<std::vector<float>> inner_data(kAsync, std::vector<float>(8, 1.0f));
        for (int i = 0; i < kAsync && async_status.ok(); ++i) {
          std::vector<float> outer(8, 1.0f);
          AllreduceOptions ao = testing::Sum();
          ao.callback = [&, i](const Status& s) {
            if (!s.ok()) return;
            Tensor t = MakeTensor(inner_data[i].data(), DataType::kFloat32, 8);
            Handle h = AllreduceAsync("inner." + std::to_string(i), t, t, testing::Sum());
            base::MutexLock lock(&mu);
            inner.push_back(h);
          };
          Tensor t = MakeTensor(outer.data(), DataType::kFloat32, 8);
          async_status = AllreduceAsync("outer", t, t, ao).Wait();
        }
        async_done = true;
        sync.join();
        HVD_RETURN_IF_ERROR(sync_status.WithContext("sync thread"));
        HVD_RETURN_IF_ERROR(async_status.WithContext("outer operations"));
        std::vector<Handle> handles;
        {
          base::MutexLock lock(&mu);
          handles = inner;
        }
        HVD_RETURN_IF_ERROR(Check(handles.size() == kAsync,
                                  std::to_string(handles.size()) + " inner operations submitted"));
        for (Handle& h : handles) HVD_RETURN_IF_ERROR(h.Wait().WithContext("inner operation"));
        for (int i = 0; i < kAsync; ++i) {
          HVD_RETURN_IF_ERROR(ExpectEqual("inner " + std::to_string(i), inner_data[i],
                                          std::vector<float>(8, 2.0f)));
        }
        return Shutdown();
      },
      Opts());
  HVD_EXPECT_RANKS_OK(res);
}

// Every rank's caller waits for an operation no other rank has submitted yet (each submitted a
// different one first): nothing is new on any rank, round after round. Those rounds must come at
// the tick, not back to back at full speed; after 300 ms a second thread on each rank submits
// the other's operation and both complete.
TEST(CallerRounds, RoundsWhereEveryRankWaitsComeAtTheTick) {
  auto res = RunRanks(
      2,
      [](int rank, int size, const std::string& dir) -> Status {
        HVD_RETURN_IF_ERROR(InitRank(rank, size, dir));
        const std::string mine = rank == 0 ? "x" : "y", theirs = rank == 0 ? "y" : "x";
        int32_t a = 1, b = 1;
        const auto before = runtime::core::CurrentEngineStats();
        const auto start = std::chrono::steady_clock::now();
        std::thread later([&] {
          std::this_thread::sleep_for(std::chrono::milliseconds(300));
          Tensor t = MakeTensor(&b, DataType::kInt32, 1);
          (void)AllreduceAsync(theirs, t, t, testing::Sum()).Wait();
        });
        Tensor t = MakeTensor(&a, DataType::kInt32, 1);
        Status s = Allreduce(mine, t, t, testing::Sum());
        later.join();
        HVD_RETURN_IF_ERROR(s);
        const double ms =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                .count();
        const uint64_t rounds = runtime::core::CurrentEngineStats().cycles - before.cycles;
        HVD_RETURN_IF_ERROR(Check(a == 2 && b == 2, "wrong sums"));
        // HVD_CYCLE_TIME 1 ms: about one round per tick (two where a round waited for the
        // other rank), never thousands.
        HVD_RETURN_IF_ERROR(Check(rounds < 4 * ms + 50, std::to_string(rounds) + " rounds in " +
                                                            std::to_string(ms) + " ms"));
        return Shutdown();
      },
      Opts());
  HVD_EXPECT_RANKS_OK(res);
}

}  // namespace
}  // namespace hvd
