// Regression tests for engine bugs found in review. Each TEST is one bug; see the comment above it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <stdexcept>
#include <string>
#include <thread>

#include "runtime_env.h"
#include "testutil/multiproc.h"

namespace hvd {
namespace {

using testing::Check;
using testing::ExpectEqual;
using testing::InitRank;
using testing::RunOptions;
using testing::RunRanks;

bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

void SleepMs(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

RunOptions Fast() {
  RunOptions o;
  o.timeout = std::chrono::milliseconds(20000);
  o.failure_grace = std::chrono::milliseconds(3000);
  return o;
}

// A broadcast negotiated while its root was active stays in the response cache. After the root
// joins, the other ranks' next broadcast of that name hits the cache, the joined root wildcards
// the slot, and the "broadcast" runs from the root's scratch buffer: the others get garbage
// (zeros here) and an OK status instead of the coordinator's "root rank 0 has joined" error.
TEST(ReviewApi, BroadcastFromJoinedRootFailsInsteadOfSendingGarbage) {
  auto res = RunRanks(
      2,
      [](int rank, int size, const std::string& dir) -> Status {
        HVD_RETURN_IF_ERROR(InitRank(rank, size, dir));
        std::vector<int32_t> w(16, rank == 0 ? 7 : -1);
        Tensor t = MakeTensor(w.data(), DataType::kInt32, 16);
        for (int i = 0; i < 2; ++i) HVD_RETURN_IF_ERROR(Broadcast("w", t, 0));  // now cached
        HVD_RETURN_IF_ERROR(ExpectEqual("w", w, std::vector<int32_t>(16, 7)));
        if (rank == 0) return Join();
        SleepMs(300);  // rank 0 has joined by now
        std::vector<int32_t> mine(16, 42);
        Status s = Broadcast("w", MakeTensor(mine.data(), DataType::kInt32, 16), 0);
        HVD_RETURN_IF_ERROR(Join());
        HVD_RETURN_IF_ERROR(Check(!s.ok() && Contains(s.message(), "joined"),
                                  "broadcast from a joined root: want an error naming the joined "
                                  "root, got " +
                                      s.ToString() + " with w[0] = " + std::to_string(mine[0])));
        return Status::OK();
      },
      Fast());
  HVD_EXPECT_RANKS_OK(res);
}

// A joined rank contributes the reduce op's identity; prescale must apply to real contributions
// only. The executor scales the whole buffer after filling it, so the joined rank's identity 1
// (product) becomes `prescale`, and +inf (min) becomes -inf with a negative prescale.
TEST(ReviewApi, JoinedRankIdentityIsNotPrescaled) {
  auto res = RunRanks(
      2,
      [](int rank, int size, const std::string& dir) -> Status {
        HVD_RETURN_IF_ERROR(InitRank(rank, size, dir));
        if (rank == 1) return Join();
        SleepMs(200);  // rank 1 has joined
        std::vector<double> p(4, 3.0), m(4, 5.0);
        AllreduceOptions prod;
        prod.op = ReduceOp::kProduct;
        prod.prescale = 2.0;
        HVD_RETURN_IF_ERROR(Allreduce("prod", MakeTensor(p.data(), DataType::kFloat64, 4),
                                      MakeTensor(p.data(), DataType::kFloat64, 4), prod));
        AllreduceOptions mn;
        mn.op = ReduceOp::kMin;
        mn.prescale = -1.0;
        HVD_RETURN_IF_ERROR(Allreduce("min", MakeTensor(m.data(), DataType::kFloat64, 4),
                                      MakeTensor(m.data(), DataType::kFloat64, 4), mn));
        HVD_RETURN_IF_ERROR(Join());
        HVD_RETURN_IF_ERROR(ExpectEqual("product with prescale 2 (one contributor)", p,
                                        std::vector<double>(4, 6.0)));
        return ExpectEqual("min with prescale -1 (one contributor)", m,
                           std::vector<double>(4, -5.0));
      },
      Fast());
  HVD_EXPECT_RANKS_OK(res);
}

// Operation::Complete sets done_ before it runs the callback, so Ready()/Wait() can return while
// the callback is still running, although the code promises "a Wait() returning implies the
// callback ran".
TEST(ReviewApi, WaitReturnsOnlyAfterTheCallbackRan) {
  auto res = RunRanks(
      1,
      [](int rank, int size, const std::string& dir) -> Status {
        HVD_RETURN_IF_ERROR(InitRank(rank, size, dir));
        std::atomic<bool> ran{false};
        std::vector<float> v(4, 1.0f);
        AllreduceOptions o;
        o.callback = [&ran](const Status&) {
          SleepMs(300);
          ran = true;
        };
        Handle h = AllreduceAsync("cb", MakeTensor(v.data(), DataType::kFloat32, 4),
                                  MakeTensor(v.data(), DataType::kFloat32, 4), o);
        while (!h.Ready()) SleepMs(1);
        HVD_RETURN_IF_ERROR(h.Wait());
        const bool ran_at_wait = ran;
        HVD_RETURN_IF_ERROR(Shutdown());
        return Check(ran_at_wait, "Ready()/Wait() returned before the callback had finished");
      },
      Fast());
  HVD_EXPECT_RANKS_OK(res);
}

// A callback that threw unwound the background thread's round: std::terminate ended the rank.
TEST(ReviewApi, ACallbackThatThrowsIsLoggedAndTheRankGoesOn) {
  auto res = RunRanks(
      1,
      [](int rank, int size, const std::string& dir) -> Status {
        HVD_RETURN_IF_ERROR(InitRank(rank, size, dir));
        std::vector<float> v(4, 1.0f);
        const Tensor t = MakeTensor(v.data(), DataType::kFloat32, 4);
        for (int i = 0; i < 2; ++i) {  // a std::exception, then anything else
          AllreduceOptions o;
          o.callback = [i](const Status&) {
            if (i == 0) throw std::runtime_error("boom");
            throw 7;
          };
          Handle h = AllreduceAsync("throws." + std::to_string(i), t, t, o);
          HVD_RETURN_IF_ERROR(h.Wait());
        }
        HVD_RETURN_IF_ERROR(Allreduce("after", t, t));
        HVD_RETURN_IF_ERROR(Shutdown());
        return Check(v[0] == 1.0f, "a 1-rank sum changed the data");
      },
      Fast());
  HVD_EXPECT_RANKS_OK(res);
}

// With HVD_STALL_CHECK_TIME_SECONDS=0 (warnings off) and HVD_STALL_SHUTDOWN_TIME_SECONDS set, a
// stalled request that hit the response cache never reaches the coordinator (the engine moves
// cached requests there only after the check time, and never when it is 0): it hangs forever
// instead of failing after the shutdown time as an uncached one does.
TEST(ReviewApi, StallShutdownAppliesToCachedRequests) {
  auto res = RunRanks(
      2,
      [](int rank, int size, const std::string& dir) -> Status {
        HVD_RETURN_IF_ERROR(InitRank(
            rank, size, dir,
            {{"HVD_STALL_CHECK_TIME_SECONDS", "0"}, {"HVD_STALL_SHUTDOWN_TIME_SECONDS", "0.5"}}));
        std::vector<float> v(8, 1.0f);
        Tensor t = MakeTensor(v.data(), DataType::kFloat32, 8);
        for (int i = 0; i < 2; ++i) HVD_RETURN_IF_ERROR(Allreduce("x", t, t));  // cached
        if (rank == 1) {
          SleepMs(2500);
          // Releases rank 0 if it is still (wrongly) waiting; otherwise fails (rank 0 has shut
          // down, or by stall).
          (void)Allreduce("x", t, t);
          return Shutdown();
        }
        Handle h = AllreduceAsync("x", t, t);
        Status s = h.WaitFor(std::chrono::milliseconds(2000));
        Status done = h.Wait();
        HVD_RETURN_IF_ERROR(Shutdown());
        return Check(s.code() == StatusCode::kAborted && Contains(s.message(), "rank 1"),
                     "cached request stalled on rank 1: want ABORTED naming rank 1 within 2 s, "
                     "got " +
                         s.ToString() + " (finally " + done.ToString() + ")");
      },
      Fast());
  HVD_EXPECT_RANKS_OK(res);
}

// After a coordinated shutdown (another rank called Shutdown), a new submission is rejected with
// the pending operations' message, "... while this operation was pending", which is false for an
// operation submitted afterwards, and does not name the operation.
TEST(ReviewApi, SubmissionAfterPeerShutdownSaysSo) {
  auto res = RunRanks(
      2,
      [](int rank, int size, const std::string& dir) -> Status {
        HVD_RETURN_IF_ERROR(InitRank(rank, size, dir));
        const std::string down = dir + "/rank0.down";
        if (rank == 0) {
          HVD_RETURN_IF_ERROR(Shutdown());
          std::FILE* f = std::fopen(down.c_str(), "w");
          return Check(f != nullptr && std::fclose(f) == 0, "cannot write " + down);
        }
        // Rank 0's Shutdown returns once the engines agreed to stop, in the same round on both.
        for (int i = 0; i < 3000 && access(down.c_str(), F_OK) != 0; ++i) SleepMs(10);
        HVD_RETURN_IF_ERROR(Check(access(down.c_str(), F_OK) == 0, "rank 0 never shut down"));
        SleepMs(100);  // (this rank's engine stopped in the same round; its thread is ending)
        std::vector<float> v(4, 1.0f);
        Status s = Allreduce("late", MakeTensor(v.data(), DataType::kFloat32, 4),
                             MakeTensor(v.data(), DataType::kFloat32, 4));
        HVD_RETURN_IF_ERROR(Shutdown());
        return Check(!s.ok() && Contains(s.message(), "late") &&
                         !Contains(s.message(), "while this operation was pending"),
                     "late submission after a peer's shutdown: " + s.ToString());
      },
      Fast());
  HVD_EXPECT_RANKS_OK(res);
}

// Init() after Shutdown() in the same process meets the other ranks under the same rendezvous
// keys as the first Init, so it reads the previous incarnation's host and address entries.
TEST(ReviewApi, InitAfterShutdownInTheSameProcess) {
  auto res = RunRanks(
      2,
      [](int rank, int size, const std::string& dir) -> Status {
        setenv("HVD_START_TIMEOUT_SECONDS", "3", 1);
        for (int round = 0; round < 2; ++round) {
          HVD_RETURN_IF_ERROR_CTX(InitRank(rank, size, dir), "Init round " + std::to_string(round));
          std::vector<int32_t> v(4, rank + 1);
          HVD_RETURN_IF_ERROR(Allreduce("v", MakeTensor(v.data(), DataType::kInt32, 4),
                                        MakeTensor(v.data(), DataType::kInt32, 4), testing::Sum()));
          HVD_RETURN_IF_ERROR(ExpectEqual("v", v, std::vector<int32_t>(4, 3)));
          if (rank == 0 && round == 0) SleepMs(300);  // rank 1 re-inits first
          HVD_RETURN_IF_ERROR(Shutdown());
        }
        return Status::OK();
      },
      Fast());
  HVD_EXPECT_RANKS_OK(res);
}

// Callbacks run on the background thread. hvd::Shutdown() from a callback joined that very
// thread: std::thread::join threw "Resource deadlock avoided" and the process died in
// std::terminate (after HVD_SHUTDOWN_TIMEOUT_SECONDS). A synchronous operation from a callback
// waited for ever (only the blocked thread could complete it). Both must fail with a message.
TEST(ReviewApi, BlockingCallsFromACallbackFailInsteadOfAbortingOrHanging) {
  auto res = RunRanks(
      2,
      [](int rank, int size, const std::string& dir) -> Status {
        HVD_RETURN_IF_ERROR(InitRank(rank, size, dir, {{"HVD_SHUTDOWN_TIMEOUT_SECONDS", "0.5"}}));
        std::vector<float> v(4, 1.0f), w(4, 1.0f);
        Status from_cb_shutdown, from_cb_allreduce;
        AllreduceOptions o;
        o.callback = [&](const Status&) {
          from_cb_shutdown = Shutdown();
          from_cb_allreduce = Allreduce("inner", MakeTensor(w.data(), DataType::kFloat32, 4),
                                        MakeTensor(w.data(), DataType::kFloat32, 4));
        };
        Handle h = AllreduceAsync("outer", MakeTensor(v.data(), DataType::kFloat32, 4),
                                  MakeTensor(v.data(), DataType::kFloat32, 4), o);
        Status s = h.WaitFor(std::chrono::milliseconds(3000));
        HVD_RETURN_IF_ERROR(Check(s.ok(), "outer: " + s.ToString()));
        HVD_RETURN_IF_ERROR(Shutdown());
        HVD_RETURN_IF_ERROR(Check(from_cb_shutdown.code() == StatusCode::kFailedPrecondition &&
                                      Contains(from_cb_shutdown.message(), "callback"),
                                  "Shutdown() from a callback: " + from_cb_shutdown.ToString()));
        return Check(from_cb_allreduce.code() == StatusCode::kFailedPrecondition &&
                         Contains(from_cb_allreduce.message(), "callback"),
                     "Allreduce() from a callback: " + from_cb_allreduce.ToString());
      },
      Fast());
  HVD_EXPECT_RANKS_OK(res);
}

// Averages divided by "size minus the ranks joined when the response list was sent", not by the
// ranks that contributed:
//   1. a rank that submits an allreduce and then joins before the others submit it contributes
//      its data, but counted as joined: (4 + 2) / 1 instead of / 2;
//   2. the same with the key in the response cache: the joined rank's wildcard bits hide that it
//      has its own request;
//   3. a rank that submits an allreduce and joins in the same cycle, the others having joined
//      already: the join release empties the joined set in the very list that carries the
//      allreduce, so 4 / 2 instead of / 1.
TEST(ReviewApi, AverageDividesByTheRanksThatContributed) {
  auto res = RunRanks(
      2,
      [](int rank, int size, const std::string& dir) -> Status {
        HVD_RETURN_IF_ERROR(InitRank(rank, size, dir, {{"HVD_CYCLE_TIME", "20"}}));
        for (int epoch = 1; epoch <= 2; ++epoch) {  // epoch 2: "k" is in the response cache
          std::vector<float> v(4, rank == 0 ? 4.0f : 2.0f);
          Tensor t = MakeTensor(v.data(), DataType::kFloat32, 4);
          if (rank == 1) {
            Handle h = AllreduceAsync("k", t, t);  // average
            HVD_RETURN_IF_ERROR(Join());
            HVD_RETURN_IF_ERROR(h.Wait());
          } else {
            SleepMs(300);
            HVD_RETURN_IF_ERROR(Allreduce("k", t, t));
            HVD_RETURN_IF_ERROR(Join());
          }
          HVD_RETURN_IF_ERROR(ExpectEqual("epoch " + std::to_string(epoch) + ": average of 4 and 2",
                                          v, std::vector<float>(4, 3.0f)));
        }
        std::vector<float> v(4, rank == 0 ? 4.0f : 2.0f);
        Tensor t = MakeTensor(v.data(), DataType::kFloat32, 4);
        if (rank == 1) return Join();
        SleepMs(300);
        Handle h = AllreduceAsync("k3", t, t);
        HVD_RETURN_IF_ERROR(Join());
        HVD_RETURN_IF_ERROR(h.Wait());
        return ExpectEqual("average of rank 0's 4 alone (rank 1 had joined)", v,
                           std::vector<float>(4, 4.0f));
      },
      Fast());
  HVD_EXPECT_RANKS_OK(res);
}

}  // namespace
}  // namespace hvd
