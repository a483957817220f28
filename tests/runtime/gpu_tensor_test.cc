// Tensors on a CUDA device: the probe says clearly why there is no GPU, and a device tensor fails
// at submission with that reason while host tensors keep working. Where a GPU is visible, the
// no-GPU cases skip saying so (tests/gpu/ runs device tensors there).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "gpu/cuda_probe.h"
#include "runtime_env.h"
#include "testutil/multiproc.h"

namespace hvd {
namespace {

using runtime::gpu::CudaInfo;
using runtime::gpu::ProbeCuda;
using testing::Check;
using testing::Contains;
using testing::InitRank;
using testing::RunRanks;

TEST(CudaProbe, SaysWhyThereIsNoGpuOrCountsDevices) {
  CudaInfo info;
  Status s = ProbeCuda(&info);
  if (s.ok()) {
    EXPECT_GT(info.device_count, 0);
    EXPECT_GT(info.driver_version, 0);
    GTEST_SKIP() << info.device_count << " GPU(s) visible through " << info.library;
  }
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(s.message(), "no GPU: ")) << s.ToString();
  EXPECT_EQ(info.device_count, 0);
}

TEST(CudaProbe, AMissingLibraryIsNamed) {
  setenv("HVD_CUDART_LIBRARY", "/nonexistent/libcudart.so.13", 1);
  CudaInfo info;
  Status s = ProbeCuda(&info);
  unsetenv("HVD_CUDART_LIBRARY");
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  for (const char* part : {"no GPU: ", "/nonexistent/libcudart.so.13", "HVD_CUDART_LIBRARY"}) {
    EXPECT_TRUE(Contains(s.message(), part)) << "lacks '" << part << "': " << s.ToString();
  }
}

TEST(GpuTensors, ADeviceTensorFailsWithTheReasonAndHostTensorsKeepWorking) {
  CudaInfo probe;
  if (ProbeCuda(&probe).ok()) {
    GTEST_SKIP() << probe.device_count << " GPU(s) visible: device tensors run (tests/gpu/)";
  }
  auto res = RunRanks(2, [](int rank, int size, const std::string& dir) -> Status {
    HVD_RETURN_IF_ERROR(InitRank(rank, size, dir));
    std::vector<float> host(8, 1.0f);
    Tensor t = MakeTensor(host.data(), DataType::kFloat32, 8);
    Tensor dev = t;
    dev.device = 0;
    Status s = Allreduce("on.gpu", dev, dev);
    HVD_RETURN_IF_ERROR(Check(s.code() == StatusCode::kFailedPrecondition, s.ToString()));
    HVD_RETURN_IF_ERROR(Check(Contains(s.message(), "CUDA device 0"), s.ToString()));
    HVD_RETURN_IF_ERROR(
        Check(Contains(s.message(), "no GPU: "), "reason missing: " + s.ToString()));
    Tensor bad = t;
    bad.device = -2;
    Status b = Broadcast("bad.device", bad, 0);
    HVD_RETURN_IF_ERROR(
        Check(b.code() == StatusCode::kInvalidArgument && Contains(b.message(), "device -2"),
              b.ToString()));
    HVD_RETURN_IF_ERROR(Allreduce("on.host", t, t, testing::Sum()));
    HVD_RETURN_IF_ERROR(testing::ExpectEqual("sum", host, std::vector<float>(8, 2.0f)));
    return Shutdown();
  });
  HVD_EXPECT_RANKS_OK(res);
}

}  // namespace
}  // namespace hvd
