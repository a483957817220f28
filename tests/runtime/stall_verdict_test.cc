// A key failed after HVD_STALL_SHUTDOWN_TIME_SECONDS, as the launcher hears of it: the rank that
// failed it records that it failed because of a peer (abort/<rank>), and the coordinator's stall
// report keeps naming the rank that never submitted it until an operation completes. (It used to
// clear as the key was forgotten: hvdrun said the job was "making progress again", and the job's
// cause became the rank that had waited.)
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "base/rendezvous_keys.h"
#include "core/engine.h"
#include "rendezvous/store.h"
#include "runtime_env.h"
#include "stall/stall_reporter.h"
#include "testutil/multiproc.h"

namespace hvd {
namespace {

using runtime::core::Engine;
using runtime::core::EngineOptions;
using runtime::negotiation::OpType;
using testing::Contains;
using testing::RunOptions;
using testing::RunRanks;

constexpr char kScope[] = "job/j/attempt/0";

std::shared_ptr<internal::Operation> Op(OpType type, const std::string& key,
                                        std::vector<float>* data) {
  auto op = std::make_shared<internal::Operation>();
  op->request.type = type;
  op->request.key = key;
  if (data != nullptr) {
    Tensor x = MakeTensor(data->data(), DataType::kFloat32, static_cast<int64_t>(data->size()));
    op->request.tensors.push_back({key, x.dtype, x.shape});
    op->inputs = {x};
    op->outputs = {x};
  }
  return op;
}

TEST(StallVerdict, TheFailingRankBlamesTheStalledOneAndTheReportStandsUntilProgress) {
  RunOptions opts;
  opts.timeout = std::chrono::milliseconds(30000);
  opts.failure_grace = std::chrono::milliseconds(5000);
  auto res = RunRanks(
      2,
      [](int rank, int size, const std::string& dir) -> Status {
        std::unique_ptr<runtime::transport::Transport> t;
        HVD_RETURN_IF_ERROR(testing::ConnectTcp(rank, size, dir, &t));
        auto store = runtime::rendezvous::NewMemoryStore();
        runtime::stall::StallReporter::Options so;
        so.rank = rank;
        so.hosts = {"h0", "h1"};
        so.check_seconds = 0.3;
        so.scope = kScope;
        runtime::stall::StallReporter reporter(so, store.get());
        runtime::collectives::Comm comm;
        comm.transport = t.get();
        comm.idle_timeout = std::chrono::milliseconds(10000);
        EngineOptions eo;
        eo.stall_check_seconds = 0.3;
        eo.stall_shutdown_seconds = 1;
        eo.stall_reporter = &reporter;
        Engine engine(comm, eo, nullptr);
        engine.Start();
        // Rank 1 arrives at 4 s: rank 0's checks have 3 s after its verdict (at about 1 s), and
        // its barrier then waits for rank 1 far less than the 1 s that would fail it as stalled.
        const auto t0 = std::chrono::steady_clock::now();
        Status result;
        std::vector<float> v(4, 1.0f);
        if (rank == 0) {  // rank 1 never submits "x"
          auto x = Op(OpType::kAllreduce, "x", &v);
          engine.Enqueue(x);
          Status s = x->Wait();
          if (s.ok() || !Contains(s.message(), "rank 1 has not submitted allreduce 'x'")) {
            result = Internal("x did not fail as stalled: " + s.ToString());
          }
          std::string abort;
          Status got = store->Get(
              std::string(kScope) + "/" + base::RankKey(base::RankKeyKind::kAbort, 0), &abort);
          if (result.ok() && (!got.ok() || !Contains(abort, "rank 1 has not submitted"))) {
            result = Internal("no abort record naming rank 1: " + got.ToString() + " " + abort);
          }
          // Past the engine's next report ticks (250 ms apart), which find no pending stall.
          std::this_thread::sleep_for(std::chrono::milliseconds(800));
          const std::string report = reporter.Current();
          if (result.ok() &&
              (!Contains(report, "rank 1 on h1 has not submitted allreduce 'x'") ||
               !Contains(report, "failed on that rank after HVD_STALL_SHUTDOWN_TIME_SECONDS=1"))) {
            result = Internal("the stall report did not stand after the verdict: '" + report + "'");
          }
          std::this_thread::sleep_until(t0 + std::chrono::milliseconds(3800));
        } else {
          std::this_thread::sleep_until(t0 + std::chrono::milliseconds(4000));
        }
        // Progress: both ranks complete a barrier; the verdict's report goes.
        auto barrier = Op(OpType::kBarrier, "__barrier__", nullptr);
        engine.Enqueue(barrier);
        HVD_RETURN_IF_ERROR(barrier->Wait());
        // The barrier itself waited on rank 0 past the check time: its inspector report clears
        // at the engine's next report tick.
        std::string left = reporter.Current();
        for (int i = 0; i < 40 && !left.empty(); ++i) {
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
          left = reporter.Current();
        }
        if (result.ok() && !left.empty()) {
          result = Internal("rank " + std::to_string(rank) +
                            " still reports a stall after a barrier: " + left);
        }
        // ... and the record that rank 0 failed because of rank 1: it went on.
        std::string abort = "?";
        for (int i = 0; i < 40 && rank == 0 && !abort.empty(); ++i) {
          store->Get(std::string(kScope) + "/" + base::RankKey(base::RankKeyKind::kAbort, 0),
                     &abort);
          if (!abort.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
        if (result.ok() && rank == 0 && !abort.empty()) {
          result = Internal("rank 0's stall failure record stands after a barrier: " + abort);
        }
        // Both engines run their rounds (and report ticks) until both ranks have looked.
        auto last = Op(OpType::kBarrier, "__barrier__", nullptr);
        engine.Enqueue(last);
        HVD_RETURN_IF_ERROR(last->Wait());
        engine.Stop(std::chrono::milliseconds(5000));
        return result;
      },
      opts);
  HVD_EXPECT_RANKS_OK(res);
}

}  // namespace
}  // namespace hvd
