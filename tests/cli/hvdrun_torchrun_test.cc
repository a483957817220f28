// torchrun's contract under hvdrun, end to end: a real torch.distributed program written for
// torchrun (tests/cli/torch_env_program.py: init_process_group("gloo") over env://, an all_reduce,
// a check of every variable of control/worker_env.h) runs under the real hvdrun in local mode,
// with hvd's teardown, failure report and restarts. Skips when /usr/bin/python3 has no torch.
// The same across hosts: tests/cluster/torchrun_cluster_test.cc.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "testutil/expect.h"

#include "hvdrun_process.h"

#ifndef HVDRUN_PATH
#error "HVDRUN_PATH must name the built hvdrun (tests/CMakeLists.txt)"
#endif

namespace hvd::clitest {
namespace {

constexpr auto kJobTimeout = std::chrono::seconds(60);
const std::string kPython = "/usr/bin/python3";
const std::string kProgram = std::string(HVD_SOURCE_DIR) + "/tests/cli/torch_env_program.py";

class HvdrunTorchrun : public ::testing::Test {
 protected:
  void SetUp() override {
    ProcResult r = RunProcess({kPython, "-c", "import torch.distributed"}, dir_.path(),
                              std::chrono::seconds(30));
    if (r.exit_code != 0) GTEST_SKIP() << kPython << " cannot import torch.distributed: " << r.err;
  }
  void TearDown() override { EXPECT_EQ(Leftovers(), std::vector<std::string>{}); }

  ProcResult Hvdrun(std::vector<std::string> args,
                    const std::vector<std::string>& program_args = {}) {
    args.insert(args.begin(), HVDRUN_PATH);
    args.push_back(kPython);
    args.push_back(kProgram);
    args.insert(args.end(), program_args.begin(), program_args.end());
    // PYTHONUNBUFFERED unset here: hvd sets it for the ranks.
    return RunProcess(args, dir_.path(), kJobTimeout,
                      {"HVD_LAUNCHER=", "HVD_TOKEN_FILE=", "PYTHONUNBUFFERED="}, dir_.path());
  }

  TempDir dir_;
};

TEST_F(HvdrunTorchrun, UnchangedProgramRunsOnFourRanks) {
  ProcResult r = Hvdrun({"-np", "4"});
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  for (int rank = 0; rank < 4; ++rank) {
    const std::string me = std::to_string(rank);
    EXPECT_HAS(r.out, "[" + me + "]<stdout>:rank " + me + "/4 ok: local " + me +
                          "/4, group 0/1, master 127.0.0.1:");
  }
  EXPECT_HAS(r.out, "restart 0/0");
}

TEST_F(HvdrunTorchrun, FailingRankGetsHvdsReportAndTeardown) {
  ProcResult r = Hvdrun({"-np", "4"}, {"--fail-rank", "1"});
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 3) << r.out << r.err;
  EXPECT_HAS(r.err, "failed: rank 1 on ");
  EXPECT_HAS(r.err, "exited with code 3");
  // Printed without a flush right before os._exit: only unbuffered output gets it out.
  EXPECT_HAS(r.out, "[1]<stdout>:rank 1 fails on attempt 0\n");
  // The other ranks, blocked in a barrier, were ended by hvd's teardown, not waited for.
  EXPECT_LT(r.seconds, 30) << r.err;
}

TEST_F(HvdrunTorchrun, TorchrunsFlagsAndRestartCount) {
  ProcResult r = Hvdrun({"--nproc_per_node", "2", "--nnodes", "1", "--max-restarts", "1"},
                        {"--fail-rank", "1", "--fail-first-attempt-only", "--max-restarts", "1"});
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_HAS(r.out, "[1]<stdout>:rank 1 fails on attempt 0\n");
  EXPECT_HAS(r.err, "restart 1 of 1");
  // The second attempt met at a port chosen again and counts the restart.
  EXPECT_HAS(r.out, "[0]<stdout>:rank 0/2 ok: local 0/2, group 0/1, master 127.0.0.1:");
  EXPECT_HAS(r.out, "[1]<stdout>:rank 1/2 ok: local 1/2, group 0/1, master 127.0.0.1:");
  EXPECT_HAS(r.out, "restart 1/1");
}

TEST_F(HvdrunTorchrun, UsersOwnMasterPortWins) {
  // A port free now, outside what the agent would choose (the kernel's ephemeral range). Another
  // test's connection may take it before rank 0's store binds it: then (only then) another port,
  // a bounded number of times.
  std::string port;
  ProcResult r;
  for (int attempt = 0; attempt < 3; ++attempt) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in a = {};
    a.sin_family = AF_INET;
    ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    socklen_t len = sizeof a;
    ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
    close(fd);
    port = std::to_string(ntohs(a.sin_port));
    r = Hvdrun({"-np", "2", "-x", "MASTER_PORT=" + port});
    if (r.exit_code == 0 || (r.out + r.err).find("already in use") == std::string::npos) break;
  }
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_HAS(r.out,
             "[0]<stdout>:rank 0/2 ok: local 0/2, group 0/1, master 127.0.0.1:" + port + ",");
}

// The shape flags refused before anything starts need no torch: hvdrun_args_test
// (TorchrunShapeFlagsThatMeanSomethingElseAreRefused).

}  // namespace
}  // namespace hvd::clitest
