// Regression tests for process-set bugs found in review. Each TEST is one bug; see its comment.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "core/engine.h"
#include "rendezvous/store.h"
#include "runtime_env.h"
#include "stall/stall_reporter.h"
#include "testutil/multiproc.h"

namespace hvd {
namespace {

using testing::Check;
using testing::Contains;
using testing::ExpectEqual;
using testing::InitRankWith;
using testing::RunOptions;
using testing::RunRanks;

RunOptions Opts(int timeout_ms = 30000, int grace_ms = 5000) {
  RunOptions o;
  o.timeout = std::chrono::milliseconds(timeout_ms);
  o.failure_grace = std::chrono::milliseconds(grace_ms);
  return o;
}

// A broadcast whose ranks disagree on the root, in set {1, 2, 3}: the roots were given as job
// ranks (2 and 3), but the mismatch error described each request's root after Enqueue had turned
// it into a set rank ("root=1", "root=2"): it named job rank 1 (not even a root) and hid 3.
TEST(SetsReview, BroadcastRootMismatchNamesTheJobRanksGiven) {
  auto res = RunRanks(
      4,
      [](int rank, int size, const std::string& dir) -> Status {
        InitOptions o;
        o.process_sets = {{1, 2, 3}};
        HVD_RETURN_IF_ERROR(InitRankWith(rank, size, dir, o));
        if (rank >= 1) {
          std::vector<float> v(4, 1.0f);
          const int root = rank == 3 ? 3 : 2;
          Status b = Broadcast("roots", MakeTensor(v.data(), DataType::kFloat32, 4), root, 1);
          HVD_RETURN_IF_ERROR(Check(!b.ok(), "mismatched roots succeeded"));
          HVD_RETURN_IF_ERROR(Check(Contains(b.message(), "root=2") &&
                                        Contains(b.message(), "root=3") &&
                                        !Contains(b.message(), "root=1"),
                                    "roots not named by job rank: " + b.message()));
        }
        HVD_RETURN_IF_ERROR(Barrier());
        return Shutdown();
      },
      Opts());
  HVD_EXPECT_RANKS_OK(res);
}

// A member of set {1, 2, 3} dies between the global set's cycle and the set's: the others fail
// receiving the set's ready bits from set rank 2. The control messages named that peer by its set
// rank ("ready bits of rank 2"), i.e. job rank 2, which is alive; the dead one is job rank 3.
TEST(SetsReview, ControlErrorsInASetNameJobRanks) {
  auto res = RunRanks(
      4,
      [](int rank, int size, const std::string& dir) -> Status {
        InitOptions o;
        o.process_sets = {{1, 2, 3}};
        HVD_RETURN_IF_ERROR(InitRankWith(rank, size, dir, o, {{"HVD_PEER_TIMEOUT_SECONDS", "5"}}));
        std::vector<int32_t> v(4, rank);
        AllreduceOptions ao = testing::Sum();
        if (rank == 3) {
          // Dies on the background thread, right after the global set's collective ran.
          ao.callback = [](const Status&) { _exit(0); };
        }
        Status s = Allreduce("global", MakeTensor(v.data(), DataType::kInt32, 4),
                             MakeTensor(v.data(), DataType::kInt32, 4), ao);
        if (rank == 3) return Internal("rank 3 should have died");
        // Whatever reaches this rank next fails with the engine's error.
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        std::vector<int32_t> w(4, rank);
        AllreduceOptions so = testing::Sum();
        so.process_set = rank == 0 ? 0 : 1;
        Status e = Allreduce("after", MakeTensor(w.data(), DataType::kInt32, 4),
                             MakeTensor(w.data(), DataType::kInt32, 4), so);
        HVD_RETURN_IF_ERROR(Check(!e.ok(), "an allreduce after rank 3 died succeeded"));
        std::fprintf(stderr, "rank %d: %s\n", rank, e.message().c_str());
        // The set's members exchange their ready bits directly (negotiation/exchange.h): a
        // member fails receiving them from the dead one (set rank 2, job rank 3), or from a member
        // that failed first and closed its links. Either way the peer named must be the job rank
        // whose shared-memory segment it is ("rank 3 (shm segment 'hvd-shm:shm:3'"), never the
        // set rank.
        const std::string& m = e.message();
        const size_t at = m.find("ready bits: rank ");
        if ((rank == 1 || rank == 2) && Contains(m, "process set 1") && at != std::string::npos) {
          const std::string named = m.substr(at + 17, 1);
          HVD_RETURN_IF_ERROR(
              Check(named != std::to_string(rank) &&
                        Contains(m, "rank " + named + " (shm segment 'hvd-shm:shm:" + named + "'"),
                    "a set member names a peer by its set rank: " + m));
        }
        return Status::OK();
      },
      Opts(40000, 20000));
  for (int r = 0; r < 3; ++r) {
    EXPECT_TRUE(res.ranks[r].ok()) << res.ranks[r].Describe();
  }
}

// Rank 1 coordinates set {1, 2} (not rank 0, which coordinates the global set). A key stalled in
// that set is reported to the launcher; then the set is removed. The engine only told the
// reporter about inspector stalls while some set on the rank had its coordinator there, so with
// the set gone it never said the stall was over: rank 1 reported it until the job ended.
TEST(SetsReview, StallReportOfARemovedSetIsCleared) {
  using runtime::core::Engine;
  using runtime::core::EngineOptions;
  using runtime::negotiation::OpType;
  auto res = RunRanks(
      3,
      [](int rank, int size, const std::string& dir) -> Status {
        std::unique_ptr<runtime::transport::Transport> t;
        HVD_RETURN_IF_ERROR(testing::ConnectTcp(rank, size, dir, &t));
        auto store = runtime::rendezvous::NewMemoryStore();
        runtime::stall::StallReporter::Options so;
        so.rank = rank;
        so.hosts = std::vector<std::string>(size, "h");
        so.check_seconds = 0.2;
        runtime::stall::StallReporter reporter(so, store.get());
        runtime::collectives::Comm comm;
        comm.transport = t.get();
        comm.idle_timeout = std::chrono::milliseconds(10000);
        EngineOptions eo;
        eo.stall_check_seconds = 0.2;
        eo.stall_reporter = &reporter;
        eo.process_sets = {{1, 2}};
        eo.dynamic_process_sets = true;
        Engine engine(comm, eo, nullptr);
        engine.Start();
        auto submit = [&](OpType type, const std::string& key, int set) {
          auto op = std::make_shared<internal::Operation>();
          op->request.type = type;
          op->request.key = key;
          op->request.process_set = set;
          return op;
        };
        std::shared_ptr<internal::Operation> orphan;
        std::vector<float> v(4, 1.0f);
        if (rank == 1) {  // rank 2 never submits it
          orphan = submit(OpType::kAllreduce, "orphan", 1);
          Tensor x = MakeTensor(v.data(), DataType::kFloat32, 4);
          orphan->request.tensors.push_back({"orphan", x.dtype, x.shape});
          orphan->inputs = {x};
          orphan->outputs = {x};
          engine.Enqueue(orphan);
        }
        Status result;
        auto wait_report = [&](bool want_stall) {
          const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
          while (std::chrono::steady_clock::now() < deadline) {
            if (reporter.Current().empty() != want_stall) return true;
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
          }
          return false;
        };
        if (rank == 1 && !wait_report(true)) result = Internal("rank 1 never reported the stall");
        // Every rank removes the set (a global operation).
        std::this_thread::sleep_for(std::chrono::milliseconds(rank == 1 ? 0 : 1500));
        auto remove = submit(OpType::kRemoveProcessSet, "__remove_process_set__", 0);
        remove->request.root = 1;
        engine.Enqueue(remove);
        HVD_RETURN_IF_ERROR(remove->Wait());
        if (orphan && orphan->Wait().ok()) result = Internal("the orphan succeeded");
        if (result.ok() && rank == 1 && !wait_report(false)) {
          result = Internal("the stall of removed set 1 is still reported: " + reporter.Current());
        }
        // Rank 1's engine must keep running while it watches the report.
        auto barrier = submit(OpType::kBarrier, "__barrier__", 0);
        engine.Enqueue(barrier);
        HVD_RETURN_IF_ERROR(barrier->Wait());
        engine.Stop(std::chrono::milliseconds(5000));
        return result;
      },
      Opts());
  HVD_EXPECT_RANKS_OK(res);
}

}  // namespace
}  // namespace hvd
