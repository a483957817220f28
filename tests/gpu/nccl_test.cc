// NCCL through the plugin (runtime/gpu/cuda/nccl_*.cc): loading, a single-rank communicator's
// collectives on the device, and an init that never completes (the other rank never comes): a
// DeadlineExceeded within the timeout plus 2 s, or the `cancelled` callback's error, quickly.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "gpu/gpu_test_util.h"

namespace hvd::runtime::gpu::testing {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

class NcclTest : public GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    const Status s = backend_->LoadNccl();
    // NcclLoads fails loudly below; here the collectives' tests only need to say why they skip.
    if (!s.ok()) GTEST_SKIP() << "NCCL: " << s.message();
  }

  // A communicator of this process alone on device 0.
  void SingleRank(std::unique_ptr<NcclComm>* comm) {
    std::string id;
    ASSERT_TRUE(backend_->NcclUniqueId(&id).ok());
    ASSERT_EQ(id.size(), 128u);
    const Status s = backend_->NcclInit(id, 0, 1, 0, milliseconds(60000), nullptr, comm);
    ASSERT_TRUE(s.ok()) << s.ToString();
    ASSERT_EQ((*comm)->rank(), 0);
    ASSERT_EQ((*comm)->size(), 1);
  }

  template <typename T>
  std::vector<T> Download(const void* src, size_t count) {
    EXPECT_TRUE(device_->Synchronize().ok());
    std::vector<T> out(count);
    EXPECT_EQ(cudaMemcpy(out.data(), src, count * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return out;
  }
};

TEST(NcclLoad, LoadsWhereAGpuIs) {
  GpuBackend* backend = nullptr;
  const Status s = LoadBackend(&backend);
  if (!s.ok()) GTEST_SKIP() << s.message();
  const Status n = backend->LoadNccl();
  ASSERT_TRUE(n.ok()) << n.ToString() << " (set HVD_NCCL_LIBRARY to libnccl.so.2)";
  EXPECT_GE(backend->nccl_version(), 21400);
  EXPECT_NE(backend->Describe().find("NCCL"), std::string::npos) << backend->Describe();
}

TEST_F(NcclTest, SingleRankCollectivesOnTheDevice) {
  std::unique_ptr<NcclComm> comm;
  SingleRank(&comm);
  if (HasFatalFailure()) return;
  void* stream = device_->stream();
  constexpr size_t n = 1025;
  std::vector<float> host(n);
  std::iota(host.begin(), host.end(), -500.0f);
  DeviceMemory a(n * 4), b(n * 4);
  HVD_CUDA_OK(cudaMemcpy(a.get(), host.data(), n * 4, cudaMemcpyHostToDevice));
  HVD_CUDA_OK(cudaDeviceSynchronize());  // ordered before hvd's own stream

  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct}) {
    HVD_CUDA_OK(cudaMemset(b.get(), 0, n * 4));
    HVD_CUDA_OK(cudaDeviceSynchronize());  // ordered before hvd's own stream
    const Status s = comm->Allreduce(a.get(), b.get(), n, DataType::kFloat32, op, stream);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(Download<float>(b.get(), n), host) << ReduceOpName(op);
  }
  // In place, int32 and bool (sum is a logical or: NCCL's max on bytes).
  std::vector<int32_t> ints(n);
  std::iota(ints.begin(), ints.end(), -7);
  HVD_CUDA_OK(cudaMemcpy(b.get(), ints.data(), n * 4, cudaMemcpyHostToDevice));
  HVD_CUDA_OK(cudaDeviceSynchronize());  // ordered before hvd's own stream
  ASSERT_TRUE(comm->Allreduce(b.get(), b.get(), n, DataType::kInt32, ReduceOp::kSum, stream).ok());
  EXPECT_EQ(Download<int32_t>(b.get(), n), ints);
  std::vector<uint8_t> bools = {0, 1, 1, 0, 1};
  HVD_CUDA_OK(cudaMemcpy(b.get(), bools.data(), bools.size(), cudaMemcpyHostToDevice));
  HVD_CUDA_OK(cudaDeviceSynchronize());  // ordered before hvd's own stream
  ASSERT_TRUE(
      comm->Allreduce(b.get(), b.get(), bools.size(), DataType::kBool, ReduceOp::kSum, stream)
          .ok());
  EXPECT_EQ(Download<uint8_t>(b.get(), bools.size()), bools);

  // int16 has no NCCL type: Unimplemented, naming it, so that the caller can use the host.
  Status s = comm->Allreduce(a.get(), b.get(), n, DataType::kInt16, ReduceOp::kSum, stream);
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented) << s.ToString();
  EXPECT_NE(s.message().find("int16"), std::string::npos) << s.message();

  HVD_CUDA_OK(cudaMemcpy(b.get(), host.data(), n * 4, cudaMemcpyHostToDevice));
  HVD_CUDA_OK(cudaDeviceSynchronize());  // ordered before hvd's own stream
  ASSERT_TRUE(comm->Broadcast(b.get(), n * 4, 0, stream).ok());
  EXPECT_EQ(Download<float>(b.get(), n), host);
  EXPECT_EQ(comm->Broadcast(b.get(), n * 4, 1, stream).code(), StatusCode::kInvalidArgument);

  HVD_CUDA_OK(cudaMemset(b.get(), 0, n * 4));
  HVD_CUDA_OK(cudaDeviceSynchronize());  // ordered before hvd's own stream
  ASSERT_TRUE(comm->Allgather(a.get(), b.get(), n * 4, stream).ok());
  EXPECT_EQ(Download<float>(b.get(), n), host);

  HVD_CUDA_OK(cudaMemset(b.get(), 0, n * 4));
  HVD_CUDA_OK(cudaDeviceSynchronize());  // ordered before hvd's own stream
  ASSERT_TRUE(
      comm->Reducescatter(a.get(), b.get(), n, DataType::kFloat32, ReduceOp::kSum, stream).ok());
  EXPECT_EQ(Download<float>(b.get(), n), host);

  // Alltoall with offsets: this rank's block (bytes 40.. of send) lands at byte 400 of recv.
  HVD_CUDA_OK(cudaMemset(b.get(), 0, n * 4));
  HVD_CUDA_OK(cudaDeviceSynchronize());  // ordered before hvd's own stream
  const size_t send_bytes = 2000, send_off = 40, recv_off = 400;
  ASSERT_TRUE(
      comm->Alltoall(a.get(), &send_bytes, &send_off, b.get(), &send_bytes, &recv_off, stream)
          .ok());
  std::vector<float> got = Download<float>(b.get(), n);
  for (size_t i = 0; i < send_bytes / 4; ++i) {
    ASSERT_EQ(got[recv_off / 4 + i], host[send_off / 4 + i]) << "element " << i;
  }
  EXPECT_EQ(got[0], 0.0f);

  EXPECT_TRUE(comm->AsyncError().ok());
  comm->Abort();
  comm->Abort();  // once is enough; twice is harmless
  s = comm->Allreduce(a.get(), b.get(), n, DataType::kFloat32, ReduceOp::kSum, stream);
  EXPECT_EQ(s.code(), StatusCode::kAborted) << s.ToString();
}

// The other rank of a two-rank communicator never comes: DeadlineExceeded, in time.
TEST_F(NcclTest, InitTimesOutWhenAPeerNeverComes) {
  std::string id;
  ASSERT_TRUE(backend_->NcclUniqueId(&id).ok());
  std::unique_ptr<NcclComm> comm;
  const auto timeout = milliseconds(3000);
  const auto start = Clock::now();
  const Status s = backend_->NcclInit(id, 0, 2, 0, timeout, nullptr, &comm);
  const auto took = Clock::now() - start;
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.ToString();
  EXPECT_NE(s.message().find("rank 0 of 2"), std::string::npos) << s.message();
  EXPECT_EQ(comm, nullptr);
  EXPECT_GE(took, timeout);
  EXPECT_LT(took, timeout + std::chrono::seconds(2))
      << std::chrono::duration_cast<milliseconds>(took).count() << " ms";
}

// `cancelled` turning non-OK (a peer failed, shutdown) ends the wait with its Status, quickly.
TEST_F(NcclTest, InitEndsWithTheCancelledStatus) {
  std::string id;
  ASSERT_TRUE(backend_->NcclUniqueId(&id).ok());
  std::unique_ptr<NcclComm> comm;
  const auto start = Clock::now();
  const auto cancel_at = start + milliseconds(300);
  const Status s = backend_->NcclInit(
      id, 1, 2, 0, milliseconds(60000),
      [&]() -> Status {
        if (Clock::now() < cancel_at) return Status::OK();
        return Aborted("rank 0 failed: test");
      },
      &comm);
  const auto took = Clock::now() - start;
  EXPECT_EQ(s.code(), StatusCode::kAborted) << s.ToString();
  EXPECT_EQ(s.message(), "rank 0 failed: test");
  EXPECT_EQ(comm, nullptr);
  EXPECT_LT(took, milliseconds(300) + std::chrono::seconds(2))
      << std::chrono::duration_cast<milliseconds>(took).count() << " ms";
}

TEST_F(NcclTest, InitRefusesABadId) {
  std::unique_ptr<NcclComm> comm;
  const Status s = backend_->NcclInit("short", 0, 1, 0, milliseconds(1000), nullptr, &comm);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
}

}  // namespace
}  // namespace hvd::runtime::gpu::testing
