// CPU binding end to end with the real hvdrun (--bind-to, --cpu-list, --binding-args,
// --thread-affinity), locally and against a cluster (a Launcher and Agent hosted by this test):
// every rank reports the CPUs it may run on (/proc/self/status Cpus_allowed_list, set before its
// program started), and they match the plan for this machine's topology and allowed CPUs.
#include <gtest/gtest.h>

#include <sstream>

#include "testutil/expect.h"

#include "cli/embedded.h"
#include "control/cpu_binding.h"
#include "hvdrun_process.h"
#include "test_cluster.h"

#ifndef HVDRUN_PATH
#error "HVDRUN_PATH must name the built hvdrun (tests/CMakeLists.txt)"
#endif

namespace hvd::clitest {
namespace {

constexpr auto kTimeout = std::chrono::seconds(60);
const char kReport[] = "echo \"cpus $(grep Cpus_allowed_list /proc/self/status | cut -f2)\"";

class HvdrunBinding : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(control::ReadCpuTopology("/sys/devices/system/cpu", &topology_).ok());
    ASSERT_TRUE(control::AllowedCpus(&allowed_).ok());
  }
  void TearDown() override {
    if (cluster_) cluster_->Stop();
    EXPECT_EQ(Leftovers(), std::vector<std::string>{});
  }
  void StartCluster() {
    Status s = StartTestCluster(4, HVD_AGENT_PATH, dir_ / "token", &cluster_);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  ProcResult Hvdrun(std::vector<std::string> args) {
    args.insert(args.begin(), HVDRUN_PATH);
    std::vector<std::string> env = {"HVD_LAUNCHER=", "HVD_TOKEN_FILE="};
    if (cluster_) {
      env = {"HVD_LAUNCHER=" + cluster_->address(), "HVD_TOKEN_FILE=" + (dir_ / "token")};
    }
    return RunProcess(args, dir_.path(), kTimeout, env, dir_.path());
  }
  // The line rank `rank` of `local_size` reports under `policy` on this machine.
  std::string Expected(const control::BindingPolicy& policy, int rank, int local_size) {
    control::BindingPlan plan;
    Status s = control::PlanBinding(policy, topology_, allowed_, rank, local_size, &plan);
    EXPECT_TRUE(s.ok()) << s.message();
    return "[" + std::to_string(rank) + "]<stdout>:cpus " + control::FormatCpuSet(plan.cpus) + "\n";
  }
  void BindToCoreWithFourRanks(const std::vector<std::string>& binding) {
    std::vector<std::string> args = {"-np", "4", "--start-timeout", "0"};
    args.insert(args.end(), binding.begin(), binding.end());
    args.insert(args.end(), {"sh", "-c", kReport});
    ProcResult r = Hvdrun(args);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    control::BindingPolicy core;
    core.bind_to = control::BindTo::kCore;
    for (int rank = 0; rank < 4; ++rank) EXPECT_HAS(r.out, Expected(core, rank, 4));
    control::BindingPlan plan0;
    ASSERT_TRUE(control::PlanBinding(core, topology_, allowed_, 0, 4, &plan0).ok());
    if (!plan0.note.empty()) {
      // More ranks than cores (this 2-core machine): said once, by the agent, to the user.
      EXPECT_HAS(r.err, "[0]<stderr>:hvd-agent: --bind-to core: 4 ranks on this host share");
      EXPECT_EQ(r.err.find("share"), r.err.rfind("share")) << r.err;
    }
  }

  TempDir dir_;
  std::unique_ptr<cli::EmbeddedCluster> cluster_;
  std::vector<control::CpuInfo> topology_;
  std::vector<int> allowed_;
};

TEST_F(HvdrunBinding, NoneByDefault) {
  ProcResult r = Hvdrun({"-np", "1", "--start-timeout", "0", "sh", "-c", kReport});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_HAS(r.out, "[0]<stdout>:cpus " + control::FormatCpuSet(allowed_) + "\n");
}

TEST_F(HvdrunBinding, LocalBindToCoreWrapsAroundOnFewCores) {
  BindToCoreWithFourRanks({"--bind-to", "core"});
}

TEST_F(HvdrunBinding, LocalBindingArgsAsHorovodrunPassesThem) {
  BindToCoreWithFourRanks({"--binding-args", "--bind-to core --map-by slot"});
  ProcResult r = Hvdrun({"-np", "1", "--binding-args", "--map-by node", "true"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_HAS(r.err, "--map-by node");
  r = Hvdrun({"-np", "1", "--binding-args", "--bind-to core --report-bindings", "true"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_HAS(r.err, "'--report-bindings' is not a binding option hvd implements");
}

TEST_F(HvdrunBinding, LocalBindToSocket) {
  ProcResult r =
      Hvdrun({"-np", "2", "--bind-to", "socket", "--start-timeout", "0", "sh", "-c", kReport});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  control::BindingPolicy socket;
  socket.bind_to = control::BindTo::kSocket;
  EXPECT_HAS(r.out, Expected(socket, 0, 2));
  EXPECT_HAS(r.out, Expected(socket, 1, 2));
}

TEST_F(HvdrunBinding, LocalCpuListPerRankAndItsErrors) {
  const int first = allowed_.front(), last = allowed_.back();
  const std::string list = std::to_string(last) + ";" + std::to_string(first);
  ProcResult r =
      Hvdrun({"-np", "2", "--cpu-list", list, "--start-timeout", "0", "sh", "-c", kReport});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_HAS(r.out, "[0]<stdout>:cpus " + std::to_string(last) + "\n");
  EXPECT_HAS(r.out, "[1]<stdout>:cpus " + std::to_string(first) + "\n");
  // Checked up front, naming the entry: its syntax, its count, CPUs this host does not allow.
  r = Hvdrun({"-np", "2", "--cpu-list", "0;1-x", "true"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_HAS(r.err, "--cpu-list entry 1 (\"1-x\"");
  r = Hvdrun({"-np", "3", "--cpu-list", list, "true"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_HAS(r.err, "--cpu-list has 2 entries but a host runs 3 ranks");
  r = Hvdrun({"-np", "2", "--cpu-list", std::to_string(first) + ";4000", "true"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_HAS(r.err, "--cpu-list entry 1 (\"4000\") names CPU 4000, which this host does not");
  r = Hvdrun({"-np", "2", "--cpu-list", list, "--bind-to", "core", "true"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_HAS(r.err, "give one");
}

TEST_F(HvdrunBinding, ClusterBindToCore) {
  StartCluster();
  BindToCoreWithFourRanks({"--bind-to", "core"});
}

// In cluster mode only the agent knows its CPUs: a list entry it cannot meet fails that rank's
// start with the entry named.
TEST_F(HvdrunBinding, ClusterCpuListTheAgentCannotMeet) {
  StartCluster();
  ProcResult r = Hvdrun({"-np", "2", "--cpu-list", std::to_string(allowed_.front()) + ";4000",
                         "--start-timeout", "0", "sh", "-c", kReport});
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_HAS(r.err, "--cpu-list entry 1 (\"4000\") names CPU 4000");
}

// The runtime pins its background thread (HVD_THREAD_AFFINITY from --thread-affinity).
TEST_F(HvdrunBinding, ThreadAffinityReachesTheRuntime) {
  const std::string cpu = std::to_string(allowed_.back());
  ProcResult r = RunProcess(
      {HVDRUN_PATH, "-np", "1", "--thread-affinity", cpu, EXAMPLE_TRAIN_PATH}, dir_.path(),
      kTimeout, {"HVD_LAUNCHER=", "HVD_TOKEN_FILE=", "HVD_LOG_LEVEL=info"}, dir_.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_HAS(r.out + r.err, "background thread of local rank 0 pinned to CPU " + cpu);
  r = RunProcess({HVDRUN_PATH, "-np", "1", "--thread-affinity", "0,x", "true"}, dir_.path(),
                 kTimeout, {"HVD_LAUNCHER=", "HVD_TOKEN_FILE="}, dir_.path());
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_HAS(r.err, "--thread-affinity entry 1 ('x')");
}

}  // namespace
}  // namespace hvd::clitest
