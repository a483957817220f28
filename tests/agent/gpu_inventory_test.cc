// GPU discovery: nvidia-smi's CSV, the sources' refusals when a host has no driver (every CI
// machine), and the inventory's description. A host with GPUs also checks NVML and nvidia-smi
// agree.
#include "agent/gpu_inventory.h"

#include <gtest/gtest.h>

#include "testutil/expect.h"

namespace hvd::agent {
namespace {

TEST(GpuInventory, ParsesNvidiaSmiCsv) {
  std::vector<GpuInfo> gpus;
  ASSERT_TRUE(ParseNvidiaSmiCsv("0, NVIDIA H100 80GB HBM3, GPU-8c2f, 81559\n"
                                "1, NVIDIA H100 80GB HBM3, GPU-91aa, 81559\n\n",
                                &gpus)
                  .ok());
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_EQ(gpus[1].index, 1);
  EXPECT_EQ(gpus[1].name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(gpus[1].uuid, "GPU-91aa");
  EXPECT_EQ(gpus[1].memory_bytes, 81559ull << 20);
  ASSERT_TRUE(ParseNvidiaSmiCsv("", &gpus).ok());
  EXPECT_TRUE(gpus.empty());
  Status s = ParseNvidiaSmiCsv("No devices were found\n", &gpus);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_HAS(s.message(), "unexpected line: 'No devices were found'");
  EXPECT_FALSE(ParseNvidiaSmiCsv("x, a, b, 1\n", &gpus).ok());
}

TEST(GpuInventory, MissingSourcesSayWhy) {
  std::vector<GpuInfo> gpus;
  Status s = GpusFromNvml("libhvd-no-such-nvml.so", &gpus);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_HAS(s.message(), "libhvd-no-such-nvml.so not found");
  s = GpusFromNvidiaSmi("hvd-no-such-nvidia-smi", std::chrono::seconds(5), &gpus);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_HAS(s.message(), "hvd-no-such-nvidia-smi");
  // A program that prints nothing useful and fails.
  s = GpusFromNvidiaSmi("false", std::chrono::seconds(5), &gpus);
  EXPECT_HAS(s.message(), "false failed (exit 1)");
}

TEST(GpuInventory, AHungNvidiaSmiIsCutOffAtItsDeadline) {
  // hang.sh stands in for a wedged nvidia-smi: it sleeps whatever its arguments.
  std::vector<GpuInfo> gpus;
  const auto t0 = std::chrono::steady_clock::now();
  Status s = GpusFromNvidiaSmi(HVD_SOURCE_DIR "/tests/agent/hang.sh",
                               std::chrono::milliseconds(300), &gpus);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  EXPECT_HAS(s.message(), "did not answer within 300 ms");
}

TEST(GpuInventory, DescribesWhatItFound) {
  GpuInventory inv;
  inv.source = "NVML";
  inv.gpus = {{0, "NVIDIA H100 80GB HBM3", "GPU-1", 80ull << 30}, {1, "", "", 0}};
  EXPECT_EQ(inv.Describe(), "2 GPU(s) from NVML: NVIDIA H100 80GB HBM3 (80 GiB), GPU 1");
  GpuInventory none;
  none.notes = "NVML: not found";
  EXPECT_EQ(none.Describe(), "no GPU (NVML: not found)");
}

TEST(GpuInventory, ThisHost) {
  const GpuInventory inv = DiscoverGpus();
  if (inv.gpus.empty()) {
    EXPECT_EQ(inv.source, "none");
    EXPECT_HAS(inv.notes, "NVML: ");
    GTEST_SKIP() << "no GPU on this host: " << inv.Describe();
  }
  // With a driver NVML answers, with names; nvidia-smi, when present, agrees on the count.
  std::vector<GpuInfo> smi;
  if (GpusFromNvidiaSmi("nvidia-smi", std::chrono::seconds(10), &smi).ok()) {
    EXPECT_EQ(smi.size(), inv.gpus.size());
  }
  EXPECT_FALSE(inv.gpus[0].name.empty()) << inv.Describe();
}

}  // namespace
}  // namespace hvd::agent
