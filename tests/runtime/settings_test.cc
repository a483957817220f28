// base::Setting<T> beyond parsing: the valid range and its one error format, the settings every
// rank must agree on (flagged where declared, compared at Init), and the breadcrumbs Init logs for
// every value the environment set.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "base/settings.h"
#include "collectives/collectives.h"
#include "core/context.h"
#include "core/job_settings.h"
#include "hvd/hvd.h"
#include "rendezvous/store.h"
#include "runtime_env.h"
#include "testutil/multiproc.h"

namespace hvd {
namespace {

using base::Setting;
using testing::Check;
using testing::Contains;

TEST(SettingRange, OutOfRangeNamesVariableValueRangeAndWhatToDo) {
  Setting<int64_t> n("HVD_TEST_RANGE_INT", "HOROVOD_TEST_RANGE_INT", 8192, "test",
                     {4096, int64_t{1} << 30});
  int64_t v = 0;
  ASSERT_TRUE(n.Get(&v).ok());
  EXPECT_EQ(v, 8192);
  setenv("HVD_TEST_RANGE_INT", "100", 1);
  Status s = n.Get(&v);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(
      s.message(),
      "HVD_TEST_RANGE_INT=100 is out of range [4096, 1073741824]: give a value in that range, "
      "or unset it for the default, 8192");
  setenv("HVD_TEST_RANGE_INT", "4096", 1);  // bounds are valid values
  ASSERT_TRUE(n.Get(&v).ok());
  EXPECT_EQ(v, 4096);
  unsetenv("HVD_TEST_RANGE_INT");
  setenv("HOROVOD_TEST_RANGE_INT", "2147483648", 1);  // the message names the variable set
  s = n.Get(&v);
  EXPECT_TRUE(Contains(s.message(), "HOROVOD_TEST_RANGE_INT=2147483648 is out of range"))
      << s.message();
  unsetenv("HOROVOD_TEST_RANGE_INT");
  // A value given otherwise (hvd::InitOptions) is checked under the setting's name.
  EXPECT_TRUE(n.CheckRange(5000).ok());
  EXPECT_TRUE(Contains(n.CheckRange(1).message(), "HVD_TEST_RANGE_INT=1 is out of range"));
}

TEST(SettingRange, DoublesAndOwnAdviceUseTheSameFormat) {
  Setting<double> d("HVD_TEST_RANGE_DOUBLE", nullptr, 1.0, "test", {0, 60000, "milliseconds"});
  setenv("HVD_TEST_RANGE_DOUBLE", "70000.5", 1);
  double v = 0;
  Status s = d.Get(&v);
  EXPECT_EQ(s.message(), "HVD_TEST_RANGE_DOUBLE=70000.5 is out of range [0, 60000]: milliseconds");
  setenv("HVD_TEST_RANGE_DOUBLE", "-0.5", 1);
  EXPECT_FALSE(d.Get(&v).ok());
  setenv("HVD_TEST_RANGE_DOUBLE", "2.5", 1);
  ASSERT_TRUE(d.Get(&v).ok());
  EXPECT_EQ(v, 2.5);
  unsetenv("HVD_TEST_RANGE_DOUBLE");
  // Bounds known only at run time: the same format.
  EXPECT_EQ(base::CheckRange("HVD_RANK", 7, 0, 1, "ranks count from 0 to size-1").message(),
            "HVD_RANK=7 is out of range [0, 1]: ranks count from 0 to size-1");
  EXPECT_TRUE(base::CheckRange("HVD_RANK", 1, 0, 1, "").ok());
}

TEST(SettingRange, MalformedStaysAParseError) {
  Setting<int64_t> n("HVD_TEST_RANGE_BAD", nullptr, 5, "test", {0, 10});
  setenv("HVD_TEST_RANGE_BAD", "ten", 1);
  int64_t v;
  Status s = n.Get(&v);
  EXPECT_TRUE(Contains(s.message(), "environment variable HVD_TEST_RANGE_BAD=ten")) << s.message();
  // A number too large for any integer says so, rather than that it is not a number.
  setenv("HVD_TEST_RANGE_BAD", "99999999999999999999", 1);
  s = n.Get(&v);
  EXPECT_TRUE(Contains(s.message(), "out of the range of a 64-bit integer")) << s.message();
  unsetenv("HVD_TEST_RANGE_BAD");
}

// The flag replaces a list of names kept by hand: these are the settings that shape the
// collectives (docs/configuration.md lists them), and no other.
TEST(SameOnEveryRank, FlaggedWhereDeclared) {
  ASSERT_FALSE(IsInitialized());  // links the engine and its settings into this binary
  std::vector<std::string> flagged;
  for (const base::SettingInfo& s : base::AllSettings()) {
    if (s.same_on_every_rank()) flagged.push_back(s.name);
  }
  std::sort(flagged.begin(), flagged.end());
  EXPECT_EQ(flagged,
            (std::vector<std::string>{
                "HVD_CACHE_CAPACITY", "HVD_DIRECT_ALLREDUCE_MAX_BYTES_SHM",
                "HVD_DIRECT_ALLREDUCE_MAX_BYTES_TCP", "HVD_FUSION_MAX_TENSOR_BYTES",
                "HVD_FUSION_THRESHOLD", "HVD_HIERARCHICAL_ALLREDUCE", "HVD_RING_CHUNK_BYTES",
                "HVD_RING_CHUNK_BYTES_TCP", "HVD_RING_LOOKAHEAD_CHUNKS_TCP", "HVD_SHM",
                "HVD_SINGLE_COPY_MEASURE", "HVD_SINGLE_COPY_MIN_BYTES"}));
}

TEST(SameOnEveryRank, PublishedInNameOrderNormalized) {
  setenv("HVD_SHM", "true", 1);
  setenv("HOROVOD_FUSION_THRESHOLD", "0x10", 1);  // not an integer: published as written
  std::string line;
  ASSERT_TRUE(runtime::core::JobWideSettings(&line).ok());
  EXPECT_EQ(line,
            "HVD_CACHE_CAPACITY=1024 HVD_DIRECT_ALLREDUCE_MAX_BYTES_SHM=65536 "
            "HVD_DIRECT_ALLREDUCE_MAX_BYTES_TCP=262144 HVD_FUSION_MAX_TENSOR_BYTES=65536 "
            "HVD_FUSION_THRESHOLD=0x10 HVD_HIERARCHICAL_ALLREDUCE=1 HVD_RING_CHUNK_BYTES=262144 "
            "HVD_RING_CHUNK_BYTES_TCP=262144 HVD_RING_LOOKAHEAD_CHUNKS_TCP=4 HVD_SHM=1 "
            "HVD_SINGLE_COPY_MEASURE=1 "
            "HVD_SINGLE_COPY_MIN_BYTES=262144");
  unsetenv("HVD_SHM");
  unsetenv("HOROVOD_FUSION_THRESHOLD");
  std::string theirs = line;
  theirs.replace(theirs.find("HVD_RING_CHUNK_BYTES=262144"), 27, "HVD_RING_CHUNK_BYTES=4096");
  Status s = runtime::core::CompareJobWideSettings(line, 0, theirs, 3);
  EXPECT_TRUE(Contains(s.message(), "HVD_RING_CHUNK_BYTES is 4096 on rank 3 but 262144 on rank 0"))
      << s.message();
}

TEST(SameOnEveryRank, ProcessSetsShownAsTheListsOfRanksPassed) {
  // hvd.init(process_sets=[ProcessSet([rank])]): the published "0" and "1" read as counts.
  const std::string base = "HVD_SHM=1 dynamic_process_sets=0";
  Status s = runtime::core::CompareJobWideSettings(base + " process_sets=0", 0,
                                                   base + " process_sets=1", 1);
  EXPECT_TRUE(Contains(s.message(), "process_sets is [[1]] on rank 1 but [[0]] on rank 0"))
      << s.message();
  s = runtime::core::CompareJobWideSettings(base + " process_sets=0,1;2,3", 2,
                                            base + " process_sets=", 3);
  EXPECT_TRUE(Contains(s.message(), "process_sets is [] on rank 3 but [[0, 1], [2, 3]] on rank 2"))
      << s.message();
}

TEST(Breadcrumbs, EveryValueFromTheEnvironmentOnceWithItsSource) {
  Setting<int64_t> a("HVD_TEST_CRUMB_A", "HOROVOD_TEST_CRUMB_A", 1, "test");
  Setting<std::string> b("HVD_TEST_CRUMB_SECRET", nullptr, "", "test", base::kSecret);
  Setting<int64_t> twice("HVD_TEST_CRUMB_A", "HOROVOD_TEST_CRUMB_A", 1, "declared twice");
  setenv("HOROVOD_TEST_CRUMB_A", "42", 1);
  setenv("HVD_TEST_CRUMB_SECRET", "s3cret", 1);
  std::vector<std::string> got;
  for (const base::SettingFromEnv& s : base::SettingsFromEnvironment()) {
    if (s.name.rfind("HVD_TEST_CRUMB_", 0) == 0) got.push_back(s.Breadcrumb());
  }
  EXPECT_EQ(got,
            (std::vector<std::string>{"HVD_TEST_CRUMB_A=42 (from HOROVOD_TEST_CRUMB_A)",
                                      "HVD_TEST_CRUMB_SECRET=(hidden) (from the environment)"}));
  unsetenv("HOROVOD_TEST_CRUMB_A");
  unsetenv("HVD_TEST_CRUMB_SECRET");
}

// What a rank wrote to stderr while `fn` ran.
Status CaptureStderr(const std::string& path, const std::function<Status()>& fn, std::string* out) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) return Internal("cannot create " + path);
  const int saved = dup(STDERR_FILENO);
  dup2(fd, STDERR_FILENO);
  close(fd);
  Status s = fn();
  dup2(saved, STDERR_FILENO);
  close(saved);
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return s;
}

size_t Count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t p = text.find(part); p != std::string::npos; p = text.find(part, p + 1)) ++n;
  return n;
}

// Init logs each value once; the agreed settings on rank 0 only, the others on every rank.
TEST(Breadcrumbs, InitLogsWhatTookEffect) {
  auto res = testing::RunRanks(2, [](int rank, int size, const std::string& dir) -> Status {
    std::string log;
    HVD_RETURN_IF_ERROR(CaptureStderr(
        dir + "/stderr." + std::to_string(rank),
        [&] {
          return testing::InitRank(rank, size, dir,
                                   {{"HVD_LOG_LEVEL", "info"},
                                    {"HVD_FUSION_THRESHOLD", "1048576"},
                                    {"HOROVOD_CYCLE_TIME", "2"}});
        },
        &log));
    HVD_RETURN_IF_ERROR(Shutdown());
    const size_t fusion = Count(log, "HVD_FUSION_THRESHOLD=1048576 (from the environment)");
    HVD_RETURN_IF_ERROR(Check(fusion == (rank == 0 ? 1u : 0u), "fusion breadcrumbs: " + log));
    HVD_RETURN_IF_ERROR(
        Check(Count(log, "HVD_CYCLE_TIME=2 (from HOROVOD_CYCLE_TIME)") == 1, "cycle: " + log));
    return Check(Count(log, "HVD_RANK=" + std::to_string(rank) + " (from the environment)") == 1,
                 "rank: " + log);
  });
  HVD_EXPECT_RANKS_OK(res);
}

// The ring's chunk: HVD_RING_CHUNK_BYTES within a host, HVD_RING_CHUNK_BYTES_TCP (set to 64 KiB
// here, so that the cross ring runs several chunks with its look-ahead) for a job across hosts and
// for the hierarchical allreduce's ring across hosts (each chunk waits a link delay there:
// docs/performance-fusion.md). Four ranks on two simulated hosts, then on one.
TEST(RingChunk, LargerAcrossHostsAndOnTheHierarchysCrossRing) {
  for (int hosts : {2, 1}) {
    auto res = testing::RunRanks(4, [hosts](int rank, int size, const std::string& dir) -> Status {
      setenv("HVD_RING_CHUNK_BYTES_TCP", "65536", 1);
      setenv("HVD_ADVERTISE_ADDR", "127.0.0.1", 1);
      std::unique_ptr<runtime::rendezvous::Store> store;
      HVD_RETURN_IF_ERROR(runtime::rendezvous::NewFileStore(dir, &store));
      std::unique_ptr<runtime::transport::Transport> t;
      runtime::collectives::Comm comm;
      HVD_RETURN_IF_ERROR(
          runtime::core::ConnectComm(*store, rank, size, testing::SplitHosts(size, hosts),
                                     std::chrono::milliseconds(20000), nullptr, &t, &comm));
      const size_t want = hosts > 1 ? size_t{64} << 10 : size_t{256} << 10;
      HVD_RETURN_IF_ERROR(testing::Check(comm.ring_chunk_bytes == want,
                                         "ring chunk " + std::to_string(comm.ring_chunk_bytes)));
      HVD_RETURN_IF_ERROR(
          testing::Check(comm.ring_lookahead_chunks == (hosts > 1 ? 4 : 0),
                         "look-ahead " + std::to_string(comm.ring_lookahead_chunks)));
      if (hosts > 1) {
        HVD_RETURN_IF_ERROR(testing::Check(comm.hierarchy != nullptr, "no hierarchy"));
        HVD_RETURN_IF_ERROR(testing::Check(
            comm.hierarchy->local_ring_chunk_bytes == size_t{256} << 10 &&
                comm.hierarchy->cross_ring_chunk_bytes == size_t{64} << 10 &&
                comm.hierarchy->cross_ring_lookahead_chunks == 4,
            "hierarchy chunks " + std::to_string(comm.hierarchy->local_ring_chunk_bytes) + ", " +
                std::to_string(comm.hierarchy->cross_ring_chunk_bytes)));
      }
      std::vector<int64_t> v(300000, rank + 1);  // 2.4 MB: several chunks on every ring
      HVD_RETURN_IF_ERROR(runtime::collectives::Allreduce(comm, v.data(), v.size(),
                                                          DataType::kInt64, ReduceOp::kSum));
      for (int64_t x : v) {
        HVD_RETURN_IF_ERROR(testing::Check(x == 10, "sum " + std::to_string(x) + " != 10"));
      }
      return Status::OK();
    });
    HVD_EXPECT_RANKS_OK(res);
  }
}

}  // namespace
}  // namespace hvd
