// Elastic jobs across network namespace hosts (docs/elastic.md): 2 hosts x 2 workers meet over
// TCP between namespaces; host 1's agent is killed with kill -9 mid-training (its workers go with
// it, the launcher declares it lost after the lease); the two workers on host 0 restore their
// last commit, re-form as a job of 2 and finish with the exact model of that history. Skips when
// namespaces cannot be made or /usr/bin/python3 has no torch.
#include "tests/cluster/cluster_fixture.h"

#ifndef HVD_PYTHON_DIR
#error "HVD_PYTHON_DIR must name build/python (tests/CMakeLists.txt)"
#endif

namespace hvd::clustertest {
namespace {

using std::chrono::seconds;

const std::string kPython = "/usr/bin/python3";
// Steps of 0.1 s: enough that host 1 is killed mid-training on a loaded machine (with 60 steps,
// 6 s, every worker had finished before the kill in one of three runs here).
constexpr int kSteps = 150;
const std::string kProgram = std::string(HVD_SOURCE_DIR) + "/tests/cli/elastic_program.py";

class ElasticNetns : public NetnsTest {
 protected:
  void Start() {
    clitest::ProcResult r =
        clitest::RunProcess({kPython, "-c", "import torch"}, dir_.path(), seconds(30));
    if (r.exit_code != 0) GTEST_SKIP() << kPython << " cannot import torch: " << r.err;
    HvdClusterOptions o;
    o.net.hosts = 2;
    o.slots = 2;
    StartCluster(o);
  }
};

TEST_F(ElasticNetns, AHostLostMidJobTheOthersGoOnWithTheRestoredModel) {
  Start();
  if (IsSkipped()) return;
  const std::string hosts =
      cluster_->net().host_name(0) + ":2," + cluster_->net().host_name(1) + ":2";
  std::unique_ptr<clitest::Proc> run =
      cluster_->StartIn(cluster_->net().launcher_ns(), {HVDRUN_PATH,
                                                        "--launcher",
                                                        cluster_->launcher(),
                                                        "--token-file",
                                                        cluster_->token_file(),
                                                        "-x",
                                                        std::string("PYTHONPATH=") + HVD_PYTHON_DIR,
                                                        "-np",
                                                        "4",
                                                        "--min-np",
                                                        "2",
                                                        "-H",
                                                        hosts,
                                                        kPython,
                                                        kProgram,
                                                        "--steps",
                                                        std::to_string(kSteps),
                                                        "--step-sleep",
                                                        "0.1",
                                                        "--report-first"});
  // Every worker trains before host 1 goes.
  const auto deadline = std::chrono::steady_clock::now() + seconds(40);
  while (run->Out().find("worker 3 first allreduce") == std::string::npos &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_NE(run->Out().find("worker 3 first allreduce"), std::string::npos)
      << run->Out() << run->Err();
  std::this_thread::sleep_for(seconds(1));
  cluster_->KillAgent(1);
  clitest::ProcResult r = run->Wait(seconds(90));
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_HAS(r.err, "agent on " + cluster_->net().host_name(1) + " lost");
  const std::string marker = "[0]<stdout>:worker 0 reset: rank 0/2 at step ";
  const size_t at = r.out.find(marker);
  ASSERT_NE(at, std::string::npos) << r.out << r.err;
  const int k = std::atoi(r.out.c_str() + at + marker.size());
  const std::string weight =
      "weight " + std::to_string(4 * k + 2 * (kSteps - k)) + " steps " + std::to_string(kSteps);
  EXPECT_HAS(r.out, "[0]<stdout>:worker 0 final: rank 0/2 " + weight);
  EXPECT_HAS(r.out, "[1]<stdout>:worker 1 final: rank 1/2 " + weight);
}

}  // namespace
}  // namespace hvd::clustertest
