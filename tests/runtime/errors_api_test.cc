// Failures through the public API: every one must end with a clear error on every rank, never a
// hang or a crash.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "runtime_env.h"
#include "testutil/multiproc.h"

namespace hvd {
namespace {

using testing::Check;
using testing::Contains;
using testing::InitRank;
using testing::RunRanks;

TEST(Errors, ShapeMismatchFailsOnEveryRankNamingRanksAndShapes) {
  auto res = RunRanks(3, [](int rank, int size, const std::string& dir) -> Status {
    HVD_RETURN_IF_ERROR(InitRank(rank, size, dir));
    const int64_t len = rank == 1 ? 5 : 4;
    std::vector<float> v(len, 1.0f);
    Status s = Allreduce("fc1.grad", MakeTensor(v.data(), DataType::kFloat32, len),
                         MakeTensor(v.data(), DataType::kFloat32, len));
    HVD_RETURN_IF_ERROR(
        Check(s.code() == StatusCode::kAborted, "want ABORTED, got " + s.ToString()));
    for (const char* part : {"fc1.grad", "rank 0", "rank 1", "[4]", "[5]"}) {
      HVD_RETURN_IF_ERROR(Check(Contains(s.message(), part),
                                "message lacks '" + std::string(part) + "': " + s.message()));
    }
    // The job goes on after a failed operation.
    std::vector<float> w(4, 1.0f);
    HVD_RETURN_IF_ERROR(Allreduce("next", MakeTensor(w.data(), DataType::kFloat32, 4),
                                  MakeTensor(w.data(), DataType::kFloat32, 4)));
    return Shutdown();
  });
  HVD_EXPECT_RANKS_OK(res);
}

TEST(Errors, DtypeAndOpMismatch) {
  auto res = RunRanks(2, [](int rank, int size, const std::string& dir) -> Status {
    HVD_RETURN_IF_ERROR(InitRank(rank, size, dir));
    std::vector<double> v(4, 1.0);
    Tensor t = MakeTensor(v.data(), rank == 0 ? DataType::kFloat64 : DataType::kInt64, 4);
    Status s = Allreduce("mixed", t, t);
    HVD_RETURN_IF_ERROR(Check(Contains(s.message(), "float64") && Contains(s.message(), "int64"),
                              "dtype mismatch: " + s.ToString()));
    Status b = Broadcast("b", MakeTensor(v.data(), DataType::kFloat64, 4), rank);  // roots differ
    HVD_RETURN_IF_ERROR(Check(Contains(b.message(), "root=0") && Contains(b.message(), "root=1"),
                              "root mismatch: " + b.ToString()));
    return Shutdown();
  });
  HVD_EXPECT_RANKS_OK(res);
}

TEST(Errors, KilledPeerFailsOthersWithinSeconds) {
  testing::RunOptions opts;
  opts.failure_grace = std::chrono::milliseconds(15000);
  auto res = RunRanks(
      3,
      [](int rank, int size, const std::string& dir) -> Status {
        HVD_RETURN_IF_ERROR(InitRank(rank, size, dir));
        std::vector<float> v(1 << 20, 1.0f);
        HVD_RETURN_IF_ERROR(Allreduce("warmup", MakeTensor(v.data(), DataType::kFloat32, v.size()),
                                      MakeTensor(v.data(), DataType::kFloat32, v.size())));
        if (rank == 2) raise(SIGKILL);
        auto start = std::chrono::steady_clock::now();
        Status s = Allreduce("after", MakeTensor(v.data(), DataType::kFloat32, v.size()),
                             MakeTensor(v.data(), DataType::kFloat32, v.size()));
        double secs =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        HVD_RETURN_IF_ERROR(Check(!s.ok(), "allreduce with a dead peer succeeded"));
        HVD_RETURN_IF_ERROR(Check(secs < 10, "took " + std::to_string(secs) + " s to fail"));
        HVD_RETURN_IF_ERROR(
            Check(Contains(s.message(), "rank"), "error names no peer: " + s.message()));
        // Later operations fail at once with the same cause.
        Status later = Allreduce("later", MakeTensor(v.data(), DataType::kFloat32, 4),
                                 MakeTensor(v.data(), DataType::kFloat32, 4));
        HVD_RETURN_IF_ERROR(Check(!later.ok(), "operation after failure succeeded"));
        Shutdown();
        return Status::OK();
      },
      opts);
  ASSERT_EQ(res.ranks.size(), 3u);
  EXPECT_EQ(res.ranks[2].term_signal, SIGKILL) << res.ranks[2].Describe();
  EXPECT_TRUE(res.ranks[0].ok()) << res.ranks[0].Describe();
  EXPECT_TRUE(res.ranks[1].ok()) << res.ranks[1].Describe();
}

TEST(Errors, StallIsReportedAndFailsAfterShutdownTime) {
  auto res = RunRanks(2, [](int rank, int size, const std::string& dir) -> Status {
    HVD_RETURN_IF_ERROR(InitRank(
        rank, size, dir,
        {{"HVD_STALL_CHECK_TIME_SECONDS", "0.5"}, {"HVD_STALL_SHUTDOWN_TIME_SECONDS", "1.5"}}));
    std::vector<float> v(8, 1.0f);
    Tensor t = MakeTensor(v.data(), DataType::kFloat32, 8);
    // Cached first, so the stall also exercises the cache-invalidation path.
    HVD_RETURN_IF_ERROR(Allreduce("w.grad", t, t));
    if (rank == 0) {
      Status s = Allreduce("w.grad", t, t);
      HVD_RETURN_IF_ERROR(Check(s.code() == StatusCode::kAborted, "want ABORTED: " + s.ToString()));
      HVD_RETURN_IF_ERROR(
          Check(Contains(s.message(), "rank 1 has not submitted allreduce 'w.grad'"),
                "stall message: " + s.message()));
    } else {
      // Back before rank 0 has waited the shutdown time (1.5 s) in the barrier below, which
      // would fail as stalled too.
      std::this_thread::sleep_for(std::chrono::milliseconds(2000));
    }
    HVD_RETURN_IF_ERROR(Barrier());
    return Shutdown();
  });
  HVD_EXPECT_RANKS_OK(res);
}

TEST(Errors, ShutdownOnOneRankFailsPendingOperationsElsewhere) {
  auto res = RunRanks(2, [](int rank, int size, const std::string& dir) -> Status {
    HVD_RETURN_IF_ERROR(InitRank(rank, size, dir));
    if (rank == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      return Shutdown();
    }
    std::vector<float> v(8, 1.0f);
    Status s = Allreduce("never", MakeTensor(v.data(), DataType::kFloat32, 8),
                         MakeTensor(v.data(), DataType::kFloat32, 8));
    HVD_RETURN_IF_ERROR(
        Check(s.code() == StatusCode::kAborted && Contains(s.message(), "shut down"),
              "want shut-down error, got " + s.ToString()));
    return Shutdown();
  });
  HVD_EXPECT_RANKS_OK(res);
}

TEST(Errors, BadArgumentsAndEnvironment) {
  auto res = RunRanks(1, [](int rank, int, const std::string& dir) -> Status {
    std::vector<float> v(4);
    Status before = Allreduce("x", MakeTensor(v.data(), DataType::kFloat32, 4),
                              MakeTensor(v.data(), DataType::kFloat32, 4));
    HVD_RETURN_IF_ERROR(Check(
        before.code() == StatusCode::kFailedPrecondition && Contains(before.message(), "Init"),
        "before init: " + before.ToString()));
    setenv("HVD_SIZE", "2", 1);
    unsetenv("HVD_RENDEZVOUS");
    setenv("HVD_RANK", "0", 1);
    Status s = Init();
    HVD_RETURN_IF_ERROR(Check(!s.ok() && Contains(s.message(), "HVD_RENDEZVOUS"), s.ToString()));
    setenv("HVD_RANK", "7", 1);
    s = Init();
    HVD_RETURN_IF_ERROR(Check(!s.ok() && Contains(s.message(), "HVD_RANK=7"), s.ToString()));
    // A negative value is out of range, not unset (they ran as a single process, or said
    // HVD_RANK was not set).
    setenv("HVD_RANK", "-2", 1);
    s = Init();
    HVD_RETURN_IF_ERROR(
        Check(!s.ok() && Contains(s.message(), "HVD_RANK=-2 is out of range"), s.ToString()));
    unsetenv("HVD_RANK");
    setenv("HOROVOD_SIZE", "-3", 1);
    unsetenv("HVD_SIZE");
    s = Init();
    HVD_RETURN_IF_ERROR(
        Check(!s.ok() && Contains(s.message(), "HOROVOD_SIZE=-3 is out of range"), s.ToString()));
    unsetenv("HOROVOD_SIZE");
    // Each timeout named alone, in the settings' one out-of-range format.
    // (The shutdown timeout was read only at Shutdown(): a bad value was a warning there, and
    // -5 or 1e300 closed the links at once.)
    for (const char* timeout : {"HVD_START_TIMEOUT_SECONDS", "HVD_PEER_TIMEOUT_SECONDS",
                                "HVD_SHUTDOWN_TIMEOUT_SECONDS"}) {
      setenv(timeout, "0", 1);
      s = Init();
      unsetenv(timeout);
      HVD_RETURN_IF_ERROR(Check(
          !s.ok() && Contains(s.message(), std::string(timeout) + "=0 is out of range [0.001"),
          s.ToString()));
    }
    for (const char* stall :
         {"HVD_STALL_CHECK_TIME_SECONDS", "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS"}) {
      for (const char* value : {"-5", "1e300"}) {  // both were taken silently
        setenv(stall, value, 1);
        s = Init();
        unsetenv(stall);
        HVD_RETURN_IF_ERROR(Check(!s.ok() && Contains(s.message(), std::string(stall) + "=") &&
                                      Contains(s.message(), " is out of range [0, "),
                                  s.ToString()));
      }
    }
    setenv("HVD_LOG_LEVEL", "verbose", 1);  // logging goes on at warning; Init refuses it
    s = Init();
    unsetenv("HVD_LOG_LEVEL");
    HVD_RETURN_IF_ERROR(
        Check(!s.ok() && Contains(s.message(), "HVD_LOG_LEVEL=verbose names no log level"),
              s.ToString()));
    // The launcher's topology, checked against the job and its pair.
    setenv("HVD_LOCAL_SIZE", "1", 1);
    setenv("HVD_LOCAL_RANK", "5", 1);
    s = Init();
    unsetenv("HVD_LOCAL_SIZE");
    unsetenv("HVD_LOCAL_RANK");
    HVD_RETURN_IF_ERROR(Check(
        !s.ok() && Contains(s.message(), "HVD_LOCAL_RANK=5 is out of range [0, 0]"), s.ToString()));
    // A negative value was read as unset.
    for (const char* name : {"HVD_LOCAL_RANK", "HOROVOD_CROSS_RANK"}) {
      setenv(name, "-5", 1);
      s = Init();
      unsetenv(name);
      HVD_RETURN_IF_ERROR(
          Check(!s.ok() && Contains(s.message(), std::string(name) + "=-5 is out of range"),
                s.ToString()));
    }
    setenv("HVD_CROSS_SIZE", "4", 1);
    s = Init();
    unsetenv("HVD_CROSS_SIZE");
    HVD_RETURN_IF_ERROR(Check(
        !s.ok() && Contains(s.message(), "HVD_CROSS_SIZE=4 is out of range [1, 1]"), s.ToString()));
    setenv("HOROVOD_FUSION_THRESHOLD", "lots", 1);
    s = Init();
    HVD_RETURN_IF_ERROR(
        Check(!s.ok() && Contains(s.message(), "HOROVOD_FUSION_THRESHOLD=lots"), s.ToString()));
    unsetenv("HOROVOD_FUSION_THRESHOLD");
    HVD_RETURN_IF_ERROR(Init());  // no environment: a single-process job
    HVD_RETURN_IF_ERROR(Check(Size() == 1 && Rank() == 0, "single process"));
    // Horovod's hvd.init() may be called again: a no-op on an initialized process.
    HVD_RETURN_IF_ERROR(Check(Init().ok() && Size() == 1, "second init is a no-op"));
    Tensor t = MakeTensor(v.data(), DataType::kFloat32, 4);
    std::vector<float> small(2);
    Status mismatch = Allreduce("y", t, MakeTensor(small.data(), DataType::kFloat32, 2));
    HVD_RETURN_IF_ERROR(
        Check(mismatch.code() == StatusCode::kInvalidArgument, mismatch.ToString()));
    // Shapes whose byte count overflows 64 bits or passes any address space: std::length_error
    // ended the process (allgather), or the operation "succeeded" on a wrapped-around size.
    for (const std::vector<int64_t>& shape : {std::vector<int64_t>{int64_t{1} << 61, 1},
                                              {int64_t{1} << 40, int64_t{1} << 40},
                                              {3, int64_t{1} << 62},
                                              {int64_t{1} << 47},
                                              {int64_t{1} << 62, 0}}) {
      const Tensor huge{v.data(), DataType::kFloat32, shape};
      for (Status bad : {AllgatherAsync("huge", huge).Wait(), Allreduce("huge", huge, huge),
                         Broadcast("huge", huge, 0)}) {
        HVD_RETURN_IF_ERROR(Check(bad.code() == StatusCode::kInvalidArgument &&
                                      Contains(bad.message(), "past 2^48 (256 TiB of bytes)"),
                                  bad.ToString()));
      }
    }
    Status null_data = Allreduce("z", MakeTensor(nullptr, DataType::kFloat32, 4), t);
    HVD_RETURN_IF_ERROR(Check(Contains(null_data.message(), "null"), null_data.ToString()));
    Status root = Broadcast("r", t, 3);
    HVD_RETURN_IF_ERROR(Check(Contains(root.message(), "root 3"), root.ToString()));
    Handle a = AllreduceAsync("dup", t, t);
    Handle b = AllreduceAsync("dup", t, t);
    Status first = a.Wait(), second = b.Wait();
    HVD_RETURN_IF_ERROR(Check(first.ok() != second.ok() || (first.ok() && second.ok()),
                              "duplicate names: " + first.ToString() + " / " + second.ToString()));
    (void)rank;
    (void)dir;
    return Shutdown();
  });
  HVD_EXPECT_RANKS_OK(res);
}

TEST(Errors, MissingRankAtStartupIsNamed) {
  auto res = RunRanks(2, [](int rank, int size, const std::string& dir) -> Status {
    if (rank == 1) return Status::OK();  // never shows up
    setenv("HVD_START_TIMEOUT_SECONDS", "1", 1);
    Status s = InitRank(rank, 3, dir);
    return Check(s.code() == StatusCode::kDeadlineExceeded && Contains(s.message(), "ranks 1, 2"),
                 "want ranks 1, 2 named: " + s.ToString());
  });
  HVD_EXPECT_RANKS_OK(res);
}

TEST(Errors, SettingsThatShapeCollectivesMustAgreeAcrossRanks) {
  auto res = RunRanks(3, [](int rank, int size, const std::string& dir) -> Status {
    // "true" and "1", an unset variable and its default: equal, not a mismatch.
    setenv("HVD_SHM", rank == 0 ? "true" : "1", 1);
    if (rank == 1) setenv("HVD_FUSION_MAX_TENSOR_BYTES", "65536", 1);
    if (rank == 2) setenv("HOROVOD_FUSION_THRESHOLD", "0", 1);  // the Horovod alias counts too
    Status s = InitRank(rank, size, dir);
    HVD_RETURN_IF_ERROR(Check(s.code() == StatusCode::kInvalidArgument, s.ToString()));
    const std::string other = rank == 2 ? "rank 0" : "rank 2";
    for (const std::string& part : {std::string("HVD_FUSION_THRESHOLD is "), other,
                                    std::string("must be equal on every rank")}) {
      HVD_RETURN_IF_ERROR(
          Check(Contains(s.message(), part), "message lacks '" + part + "': " + s.message()));
    }
    // The same settings everywhere: Init succeeds in a fresh rendezvous directory.
    unsetenv("HOROVOD_FUSION_THRESHOLD");
    HVD_RETURN_IF_ERROR(InitRank(rank, size, dir + "/again"));
    return Shutdown();
  });
  HVD_EXPECT_RANKS_OK(res);
}

TEST(Timeline, IsValidJsonNamingEveryTensor) {
  const std::string path =
      ::testing::TempDir() + "/hvd_timeline_" + std::to_string(getpid()) + ".json";
  auto res = RunRanks(2, [&](int rank, int size, const std::string& dir) -> Status {
    HVD_RETURN_IF_ERROR(InitRank(rank, size, dir, {{"HVD_TIMELINE", path}}));
    std::vector<float> a(100, 1.0f), b(100, 1.0f);
    for (int step = 0; step < 2; ++step) {
      Handle ha = AllreduceAsync("layer1/weights:0", MakeTensor(a.data(), DataType::kFloat32, 100),
                                 MakeTensor(a.data(), DataType::kFloat32, 100));
      Handle hb = AllreduceAsync("layer2 \"bias\"", MakeTensor(b.data(), DataType::kFloat32, 100),
                                 MakeTensor(b.data(), DataType::kFloat32, 100));
      HVD_RETURN_IF_ERROR(ha.Wait());
      HVD_RETURN_IF_ERROR(hb.Wait());
    }
    HVD_RETURN_IF_ERROR(Broadcast("bcast", MakeTensor(a.data(), DataType::kFloat32, 100), 0));
    return Shutdown();
  });
  HVD_ASSERT_RANKS_OK(res);
  std::ifstream in(path);
  ASSERT_TRUE(in.good()) << path;
  nlohmann::json trace;
  ASSERT_NO_THROW(trace = nlohmann::json::parse(in)) << "timeline is not valid JSON";
  std::set<std::string> names, phases;
  for (const auto& e : trace) {
    if (e.value("ph", "") == "M") names.insert(e["args"].value("name", ""));
    if (e.contains("name")) phases.insert(e.value("name", ""));
  }
  EXPECT_TRUE(names.count("layer1/weights:0")) << trace.dump().substr(0, 2000);
  EXPECT_TRUE(names.count("layer2 \"bias\""));
  EXPECT_TRUE(names.count("bcast"));
  for (const char* phase :
       {"ALLREDUCE", "MEMCPY_IN_FUSION_BUFFER", "MEMCPY_OUT_FUSION_BUFFER", "BROADCAST", "QUEUE"}) {
    EXPECT_TRUE(phases.count(phase)) << "no " << phase << " event";
  }
  std::remove(path.c_str());
}

}  // namespace
}  // namespace hvd
