// torchrun's contract across hosts: the torch.distributed program of tests/cli/torch_env_program.py
// (init_process_group("gloo") over env://, an all_reduce, every variable of control/worker_env.h
// checked) on 2 namespace hosts x 2 ranks. MASTER_ADDR is host-a's address, MASTER_PORT a port
// host-a's agent chose, GROUP_RANK numbers the hosts; a failing rank gets hvd's failure report and
// teardown on both hosts. Skips when namespaces cannot be made or /usr/bin/python3 has no torch.
#include "tests/cluster/cluster_fixture.h"

namespace hvd::clustertest {
namespace {

using std::chrono::seconds;

const std::string kPython = "/usr/bin/python3";
const std::string kProgram = std::string(HVD_SOURCE_DIR) + "/tests/cli/torch_env_program.py";

class TorchrunCluster : public NetnsTest {
 protected:
  void Start() {
    clitest::ProcResult r =
        clitest::RunProcess({kPython, "-c", "import torch.distributed"}, dir_.path(), seconds(30));
    if (r.exit_code != 0) GTEST_SKIP() << kPython << " cannot import torch.distributed: " << r.err;
    HvdClusterOptions o;
    o.net.hosts = 2;
    o.slots = 2;
    StartCluster(o);
  }
  clitest::ProcResult Hvdrun(const std::vector<std::string>& program_args) {
    std::vector<std::string> args = {
        "--nproc-per-node",
        "2",
        "--nnodes",
        "2",
        "-H",
        cluster_->net().host_name(0) + "," + cluster_->net().host_name(1),
        kPython,
        kProgram,
        "--hosts",
        "2",
        "--master-addr",
        cluster_->net().host_addr(0)};
    args.insert(args.end(), program_args.begin(), program_args.end());
    return cluster_->Run(cluster_->Hvdrun("", args), seconds(60));
  }
};

TEST_F(TorchrunCluster, TwoHostsTimesTwoRanksMeetAtRankZerosHost) {
  Start();
  if (IsSkipped()) return;
  clitest::ProcResult r = Hvdrun({});
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  const std::string master = "master " + cluster_->net().host_addr(0) + ":";
  EXPECT_HAS(r.out, "[0]<stdout>:rank 0/4 ok: local 0/2, group 0/2, " + master);
  EXPECT_HAS(r.out, "[1]<stdout>:rank 1/4 ok: local 1/2, group 0/2, " + master);
  EXPECT_HAS(r.out, "[2]<stdout>:rank 2/4 ok: local 0/2, group 1/2, " + master);
  EXPECT_HAS(r.out, "[3]<stdout>:rank 3/4 ok: local 1/2, group 1/2, " + master);
}

TEST_F(TorchrunCluster, FailingRankOnTheSecondHostEndsTheJobWithHvdsReport) {
  Start();
  if (IsSkipped()) return;
  clitest::ProcResult r = Hvdrun({"--fail-rank", "2"});
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 3) << r.out << r.err;
  EXPECT_HAS(r.err, "failed: rank 2 on " + cluster_->net().host_name(1) + " exited with code 3");
  EXPECT_HAS(r.out, "[2]<stdout>:rank 2 fails on attempt 0\n");
  EXPECT_LT(r.seconds, 30) << r.err;
  // TearDown checks that no rank survived on either host.
}

}  // namespace
}  // namespace hvd::clustertest
