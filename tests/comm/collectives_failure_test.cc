// Collectives when a peer fails (one forked process per rank, testutil/multiproc.h): a killed or
// hung peer fails every surviving rank quickly with an error naming it, on TCP, shared memory and
// the hierarchical path, and a group view names job ranks; then the multiproc harness itself
// (statuses, exits, signals, exceptions, timeouts, failure grace).
#include <signal.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "collectives/collectives.h"
#include "collectives_harness.h"
#include "testutil/multiproc.h"
#include "transport/group.h"

namespace hvd::runtime::collectives {
namespace {

using hvd::testing::RunOptions;
using hvd::testing::RunRanks;
using hvd::testing::RunResult;
using test::Config;
using test::Connect;
using test::MakeComm;
using test::Millis;
using transport::Transport;

// ---- Failures --------------------------------------------------------------------------------

constexpr int kFailRanks = 4;
constexpr int kVictim = 2;

// Every surviving rank must get an error naming a peer, quickly, instead of hanging; the victim's
// successor (rank 3, which receives from it in every setup below) must name the victim itself.
// The ranks return OK when the collective failed as it should, so the harness result says which
// did not.
Status ExpectPeerFailure(const Comm& comm, int rank, Millis limit) {
  std::vector<float> buf(4 << 20, 1.0f);  // 16 MiB
  const auto start = std::chrono::steady_clock::now();
  Status s = Allreduce(comm, buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kSum);
  const auto took = std::chrono::duration_cast<Millis>(std::chrono::steady_clock::now() - start);
  const std::string line = "rank " + std::to_string(rank) + " after " +
                           std::to_string(took.count()) + " ms: " + s.ToString() + "\n";
  fputs(line.c_str(), stderr);  // one write: ranks print concurrently
  if (s.ok()) return Internal("allreduce with a dead peer succeeded");
  if (took > limit) return Internal("took " + std::to_string(took.count()) + " ms to fail");
  if (s.message().find("rank ") == std::string::npos) {
    return Internal("error names no peer: " + s.ToString());
  }
  const std::string victim = "rank " + std::to_string(kVictim) + " (";
  if (rank == kVictim + 1 && s.message().find(victim) == std::string::npos) {
    return Internal("error does not name the victim (" + victim + "...): " + s.ToString());
  }
  return Status::OK();
}

// Flat TCP, shared memory, and the hierarchical path over both (ranks 2-3 on the second host).
class CollectivesFailure : public ::testing::TestWithParam<Config> {};

TEST_P(CollectivesFailure, KilledPeerFailsEveryRankQuickly) {
  RunOptions options;
  options.timeout = Millis(60000);
  options.failure_grace = Millis(30000);  // the victim's death must not cut the others short
  RunResult res = RunRanks(
      kFailRanks,
      [setup = GetParam()](int rank, int size, const std::string& dir) -> Status {
        std::unique_ptr<Transport> t;
        HVD_RETURN_IF_ERROR(Connect(setup, rank, dir, &t));
        const Comm comm = MakeComm(setup, t.get(), Millis(5000));
        int32_t warm = 1;  // the mesh works before the failure
        HVD_RETURN_IF_ERROR(Allreduce(comm, &warm, 1, DataType::kInt32, ReduceOp::kSum));
        if (rank == kVictim) raise(SIGKILL);
        return ExpectPeerFailure(comm, rank, Millis(4000));
      },
      options);
  ASSERT_EQ(res.ranks.size(), static_cast<size_t>(kFailRanks));
  EXPECT_EQ(res.ranks[kVictim].term_signal, SIGKILL) << res.ranks[kVictim].Describe();
  for (int r = 0; r < kFailRanks; ++r) {
    if (r == kVictim) continue;
    EXPECT_TRUE(res.ranks[r].ok()) << res.ranks[r].Describe();
  }
}

TEST_P(CollectivesFailure, HungPeerFailsByIdleTimeout) {
  // A stopped rank keeps its sockets open: only the idle timeout can detect it. The survivors
  // report an expected error (ABORTED, "survived: ...") so the harness kills the stopped rank.
  RunOptions options;
  options.timeout = Millis(60000);
  options.failure_grace = Millis(2000);
  RunResult res = RunRanks(
      kFailRanks,
      [setup = GetParam()](int rank, int size, const std::string& dir) -> Status {
        std::unique_ptr<Transport> t;
        HVD_RETURN_IF_ERROR(Connect(setup, rank, dir, &t));
        const Comm comm = MakeComm(setup, t.get(), Millis(3000));
        HVD_RETURN_IF_ERROR(Barrier(comm));
        if (rank == kVictim) raise(SIGSTOP);
        Status s = ExpectPeerFailure(comm, rank, Millis(10000));
        if (!s.ok()) return s;
        return Aborted("survived: the hung peer was detected");
      },
      options);
  ASSERT_EQ(res.ranks.size(), static_cast<size_t>(kFailRanks));
  EXPECT_TRUE(res.ranks[kVictim].killed_by_harness) << res.ranks[kVictim].Describe();
  for (int r = 0; r < kFailRanks; ++r) {
    if (r == kVictim) continue;
    EXPECT_EQ(res.ranks[r].status.message(), "survived: the hung peer was detected")
        << res.ranks[r].Describe();
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, CollectivesFailure,
                         ::testing::Values(Config{"tcp", kFailRanks},
                                           Config{"shm", kFailRanks, 1, true},
                                           Config{"2hosts", kFailRanks, 2, true}),
                         [](const ::testing::TestParamInfo<Config>& info) {
                           return info.param.name;
                         });

// On a process set's communicator (a group view of job ranks 1, 2, 3), errors name job ranks:
// the tree broadcast from set rank 2 is "root 3", the rank that died.
TEST(CollectivesFailure, GroupViewErrorsNameJobRanks) {
  RunOptions options;
  options.timeout = Millis(60000);
  options.failure_grace = Millis(30000);
  RunResult res = RunRanks(
      4,
      [](int rank, int size, const std::string& dir) -> Status {
        const Config setup{"tcp", 4};
        std::unique_ptr<Transport> t;
        HVD_RETURN_IF_ERROR(Connect(setup, rank, dir, &t));
        if (rank == 0) return Barrier(MakeComm(setup, t.get(), Millis(5000)));
        HVD_RETURN_IF_ERROR(Barrier(MakeComm(setup, t.get(), Millis(5000))));
        const std::vector<int> members = {1, 2, 3};
        std::unique_ptr<Transport> view = hvd::runtime::transport::NewGroupView(t.get(), members);
        Comm comm = MakeComm(setup, t.get(), Millis(5000)).Over(view.get());
        comm.job_ranks = std::make_shared<const std::vector<int>>(members);
        if (rank == 3) raise(SIGKILL);
        std::vector<float> buf(16, 1.0f);  // small: the tree, whose errors name the root
        Status s = Broadcast(comm, buf.data(), buf.size() * sizeof(float), /*root=*/2);
        if (s.ok()) return Internal("broadcast from a dead root succeeded");
        if (s.message().find("root 3") == std::string::npos ||
            s.message().find("root 2") != std::string::npos) {
          return Internal("error does not name the root by its job rank 3: " + s.ToString());
        }
        return Status::OK();
      },
      options);
  ASSERT_EQ(res.ranks.size(), 4u);
  EXPECT_EQ(res.ranks[3].term_signal, SIGKILL) << res.ranks[3].Describe();
  for (int r : {0, 1, 2}) EXPECT_TRUE(res.ranks[r].ok()) << res.ranks[r].Describe();
}

// ---- The harness itself -----------------------------------------------------------------------

TEST(MultiprocHarness, ReportsStatusesExitsSignalsAndExceptions) {
  RunOptions options;
  options.failure_grace = Millis(10000);
  RunResult res = RunRanks(
      5,
      [](int rank, int, const std::string& dir) -> Status {
        if (!std::filesystem::is_directory(dir)) return Internal("no store dir " + dir);
        switch (rank) {
          case 1:
            return Unavailable("rank 1 says no");
          case 2:
            raise(SIGKILL);
            break;
          case 3:
            throw std::runtime_error("boom");
          case 4:
            _exit(3);
        }
        return Status::OK();
      },
      options);
  ASSERT_EQ(res.ranks.size(), 5u);
  EXPECT_FALSE(res.ok());
  EXPECT_FALSE(res.timed_out);
  EXPECT_TRUE(res.ranks[0].ok()) << res.ranks[0].Describe();
  EXPECT_EQ(res.ranks[1].status.code(), StatusCode::kUnavailable);
  EXPECT_EQ(res.ranks[1].status.message(), "rank 1 says no");
  EXPECT_EQ(res.ranks[1].exit_code, 1);
  EXPECT_EQ(res.ranks[2].term_signal, SIGKILL);
  EXPECT_FALSE(res.ranks[2].reported);
  EXPECT_NE(res.ranks[3].status.message().find("boom"), std::string::npos);
  EXPECT_FALSE(res.ranks[4].reported);
  EXPECT_EQ(res.ranks[4].exit_code, 3);
  const std::string msg = res.FailureMessage();
  for (const char* part : {"rank 1: UNAVAILABLE: rank 1 says no", "rank 2:", "boom", "rank 4:"}) {
    EXPECT_NE(msg.find(part), std::string::npos) << part << " not in:\n" << msg;
  }
  EXPECT_EQ(msg.find("rank 0"), std::string::npos) << msg;
  EXPECT_FALSE(std::filesystem::exists(res.store_dir));
}

TEST(MultiprocHarness, TimeoutKillsAndReapsEveryRank) {
  RunOptions options;
  options.timeout = Millis(1000);
  RunResult res = RunRanks(
      3,
      [](int rank, int, const std::string&) -> Status {
        if (rank == 0) return Status::OK();
        for (;;) pause();
      },
      options);
  EXPECT_TRUE(res.timed_out);
  EXPECT_LT(res.elapsed, Millis(5000));
  EXPECT_TRUE(res.ranks[0].ok()) << res.ranks[0].Describe();
  for (int r : {1, 2}) {
    EXPECT_TRUE(res.ranks[r].killed_by_harness) << res.ranks[r].Describe();
    EXPECT_EQ(res.ranks[r].term_signal, SIGKILL);
  }
}

TEST(MultiprocHarness, FailureGraceKillsTheRest) {
  RunOptions options;
  options.failure_grace = Millis(500);
  RunResult res = RunRanks(
      2,
      [](int rank, int, const std::string&) -> Status {
        if (rank == 0) return Internal("first failure");
        for (;;) pause();
      },
      options);
  EXPECT_FALSE(res.timed_out);
  EXPECT_LT(res.elapsed, Millis(5000));
  EXPECT_EQ(res.ranks[0].status.message(), "first failure");
  EXPECT_TRUE(res.ranks[1].killed_by_harness) << res.ranks[1].Describe();
}

}  // namespace
}  // namespace hvd::runtime::collectives
