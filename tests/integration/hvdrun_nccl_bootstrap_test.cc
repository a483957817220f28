// The NCCL communicator's bootstrap through the launcher, end to end on a machine without a GPU:
// `hvdrun -np 2 fake_nccl_worker` starts its embedded launcher and agent, and each rank (posing as
// a process with a GPU of its own and NCCL, tests/runtime/host_gpu_backend.h) forms the global
// set's communicator with the unique id published by rank 0 in the launcher's rendezvous store
// (job/attempt scope, docs/rendezvous.md "NCCL communicators"), then runs an allreduce and an
// allgather on the device executor's NCCL path. The real NCCL runs in tests/gpu/ on a GPU.
#include <gtest/gtest.h>

#include "cli/hvdrun_process.h"
#include "testutil/expect.h"

namespace hvd::clitest {
namespace {

using std::chrono::seconds;

TEST(HvdrunNcclBootstrap, TwoRanksFormTheirCommunicatorThroughTheLauncher) {
  TempDir dir;
  const std::string nccl = dir / "nccl";
  ASSERT_EQ(mkdir(nccl.c_str(), 0700), 0);
  ProcResult r =
      RunProcess({HVDRUN_PATH, "-np", "2", "-x", "HVD_TEST_NCCL_DIR=" + nccl, "-x",
                  "HVD_NCCL_TIMEOUT_SECONDS=20", FAKE_NCCL_WORKER_PATH},
                 dir.path(), seconds(90), {"HVD_LAUNCHER=", "HVD_TOKEN_FILE="}, dir.path());
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_HAS(r.out, "rank 0: NCCL path ok (2 batches, 1 communicator(s))");
  EXPECT_HAS(r.out, "rank 1: NCCL path ok (2 batches, 1 communicator(s))");
  EXPECT_EQ(Leftovers(), std::vector<std::string>{});
}

}  // namespace
}  // namespace hvd::clitest
