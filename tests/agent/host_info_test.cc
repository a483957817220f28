// Host facts: GPU ids and their slots, /dev/nvidiaN counting, the address towards the launcher,
// and the spawn helpers' environment merge and PATH search.
#include "agent/host_info.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>

#include "agent/process_spawn.h"
#include "agent/worker_wrapper.h"
#include "base/net.h"

namespace hvd::agent {
namespace {

using V = std::vector<std::string>;

TEST(HostInfoTest, GpuIdsComeFromTheDeviceCountOrTheAgentsCudaVisibleDevices) {
  EXPECT_EQ(GpuIds(0, nullptr), V{});
  EXPECT_EQ(GpuIds(3, nullptr), (V{"0", "1", "2"}));
  EXPECT_EQ(GpuIds(8, "4, 5,6"), (V{"4", "5", "6"}));
  EXPECT_EQ(GpuIds(8, "GPU-a1b2,GPU-c3d4"), (V{"GPU-a1b2", "GPU-c3d4"}));
  EXPECT_EQ(GpuIds(8, ""), V{});
  EXPECT_EQ(GpuIds(8, "-1"), V{});
  EXPECT_EQ(GpuIds(8, "2,-1,3"), V{"2"});
}

TEST(HostInfoTest, OneGpuPerSlotWrappingAround) {
  EXPECT_EQ(CudaDeviceForSlot({}, 0), "");
  EXPECT_EQ(CudaDeviceForSlot({"4", "5"}, 0), "4");
  EXPECT_EQ(CudaDeviceForSlot({"4", "5"}, 1), "5");
  EXPECT_EQ(CudaDeviceForSlot({"4", "5"}, 2), "4");
  EXPECT_EQ(CudaDeviceForSlot({"4", "5"}, -1), "");
}

// hvdrun --gpu-isolation: the slot's GPU alone, whatever the local rank.
TEST(HostInfoTest, IsolatedRanksSeeOnlyTheirSlotsGpu) {
  std::string v;
  EXPECT_TRUE(CudaVisibleDevicesFor({"4", "5"}, 1, 0, true, &v));
  EXPECT_EQ(v, "5");
  EXPECT_TRUE(CudaVisibleDevicesFor({"4", "5"}, 2, 2, true, &v));
  EXPECT_EQ(v, "4");  // wraps around
  EXPECT_FALSE(CudaVisibleDevicesFor({}, 0, 0, true, &v));
  EXPECT_FALSE(CudaVisibleDevicesFor({"4"}, -1, 0, true, &v));
}

// The default: every GPU visible, device <local rank> being the slot's GPU.
TEST(HostInfoTest, SharedRanksSeeEveryGpuWithTheirSlotsAtTheirLocalRank) {
  std::string v = "stale";
  // A job alone on its agent: slots are local ranks, nothing to set (the agent's own value holds).
  for (int r = 0; r < 4; ++r) {
    EXPECT_FALSE(CudaVisibleDevicesFor({"0", "1", "2", "3"}, r, r, false, &v)) << r;
    EXPECT_EQ(v, "");
  }
  // Another job holds slots 0 and 1: this job's local ranks 0 and 1 are in slots 2 and 3, and both
  // see the same order, in which device 0 is GPU 2 and device 1 is GPU 3.
  EXPECT_TRUE(CudaVisibleDevicesFor({"0", "1", "2", "3"}, 2, 0, false, &v));
  EXPECT_EQ(v, "2,3,0,1");
  EXPECT_TRUE(CudaVisibleDevicesFor({"0", "1", "2", "3"}, 3, 1, false, &v));
  EXPECT_EQ(v, "2,3,0,1");
  // The agent's own list (UUIDs too) is what gets ordered.
  EXPECT_TRUE(CudaVisibleDevicesFor({"GPU-a", "GPU-b"}, 0, 1, false, &v));
  EXPECT_EQ(v, "GPU-b,GPU-a");
  // More local ranks than GPUs, or no GPU: nothing set.
  EXPECT_FALSE(CudaVisibleDevicesFor({"0", "1"}, 1, 2, false, &v));
  EXPECT_FALSE(CudaVisibleDevicesFor({}, 0, 0, false, &v));
  // Slots beyond the GPUs wrap around as isolated ones do.
  EXPECT_FALSE(CudaVisibleDevicesFor({"0", "1"}, 2, 0, false, &v));
  EXPECT_TRUE(CudaVisibleDevicesFor({"0", "1"}, 3, 0, false, &v));
  EXPECT_EQ(v, "1,0");
}

TEST(HostInfoTest, CountsOnlyNumberedNvidiaDevices) {
  char tmpl[] = "/tmp/hvd_dev_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  for (const char* n :
       {"nvidia0", "nvidia1", "nvidia12", "nvidiactl", "nvidia-uvm", "nvidia", "null"}) {
    std::ofstream(dir + "/" + n) << "";
  }
  EXPECT_EQ(CountNvidiaDevices(dir), 3);
  EXPECT_EQ(CountNvidiaDevices(dir + "/missing"), 0);
  (void)std::system(("rm -rf " + dir).c_str());
}

TEST(HostInfoTest, LocalAddressTowardsTheLauncher) {
  std::string addr;
  ASSERT_TRUE(LocalAddressTowards("127.0.0.1:7070", &addr).ok());
  EXPECT_EQ(addr, "127.0.0.1");
  ASSERT_TRUE(LocalAddressTowards("localhost:7070", &addr).ok());
  EXPECT_EQ(addr, "127.0.0.1");
  EXPECT_FALSE(LocalAddressTowards("no-port", &addr).ok());
  Status s = LocalAddressTowards("no-such-host.invalid:7070", &addr);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("no-such-host.invalid"), std::string::npos) << s.message();
  EXPECT_FALSE(base::LocalHostName().empty());
}

TEST(SpawnHelpersTest, EnvironmentOverridesWinAndMalformedEntriesAreSkipped) {
  const char* base[] = {"A=1", "B=2", "=bad", "noequals", "C=x=y", nullptr};
  EXPECT_EQ(MergeEnvironment(base, {{"B", "20"}, {"D", ""}}), (V{"A=1", "B=20", "C=x=y", "D="}));
  EXPECT_EQ(MergeEnvironment(nullptr, {{"X", "1"}}), V{"X=1"});
}

TEST(SpawnHelpersTest, ExecCandidatesFollowExecvp) {
  EXPECT_EQ(ExecCandidates("./train", "/usr/bin"), V{"./train"});
  EXPECT_EQ(ExecCandidates("/opt/x/train", "/usr/bin"), V{"/opt/x/train"});
  EXPECT_EQ(ExecCandidates("python", "/usr/local/bin::/usr/bin"),
            (V{"/usr/local/bin/python", "./python", "/usr/bin/python"}));
}

}  // namespace
}  // namespace hvd::agent
