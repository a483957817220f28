// A rank for hvdrun_nccl_bootstrap_test: it poses as a process with a GPU of its own and NCCL
// (tests/runtime/host_gpu_backend.h: device memory is host memory, NCCL a file exchange through
// HVD_TEST_NCCL_DIR), so that the NCCL unique id travels through the rendezvous store of the
// launcher that started it, exactly as on a GPU machine, and its collectives run the device
// executor's NCCL path. It prints "rank R: NCCL path ok (B batches, C communicator(s))" and exits
// 0, or prints what went wrong and exits 1.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/context.h"
#include "host_gpu_backend.h"
#include "hvd/hvd.h"

namespace {

hvd::Status Run(hvd::testing::HostGpuBackend* gpu) {
  HVD_RETURN_IF_ERROR(hvd::Init());
  const int rank = hvd::Rank(), size = hvd::Size();
  std::vector<float> x(1001);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(rank + i);
  hvd::AllreduceOptions sum;
  sum.op = hvd::ReduceOp::kSum;
  hvd::Tensor t = hvd::testing::OnDevice(x.data(), hvd::DataType::kFloat32, {1001});
  HVD_RETURN_IF_ERROR(hvd::Allreduce("grad", t, t, sum));
  for (size_t i = 0; i < x.size(); ++i) {
    const float want = static_cast<float>(size * (size - 1) / 2 + size * static_cast<int>(i));
    if (x[i] != want) {
      return hvd::Internal("element " + std::to_string(i) + " is " + std::to_string(x[i]) +
                           ", want " + std::to_string(want));
    }
  }
  std::vector<int32_t> mine(rank + 1, rank);
  hvd::Handle h = hvd::AllgatherAsync(
      "rows", hvd::testing::OnDevice(mine.data(), hvd::DataType::kInt32, {rank + 1}));
  HVD_RETURN_IF_ERROR(h.Wait());
  if (h.output_device() != 0 || h.output_bytes() != sizeof(int32_t) * size * (size + 1) / 2) {
    return hvd::Internal("allgather: " + std::to_string(h.output_bytes()) + " bytes on device " +
                         std::to_string(h.output_device()));
  }
  const auto stats = hvd::runtime::core::CurrentEngineStats();
  if (stats.gpu_nccl_batches != 2 || stats.gpu_staged_batches != 0) {
    return hvd::Internal("want 2 NCCL batches, got " + std::to_string(stats.gpu_nccl_batches) +
                         " (and " + std::to_string(stats.gpu_staged_batches) + " staged)");
  }
  std::printf("rank %d: NCCL path ok (%llu batches, %d communicator(s))\n", rank,
              static_cast<unsigned long long>(stats.gpu_nccl_batches), gpu->comms);
  std::fflush(stdout);
  return hvd::Shutdown();
}

}  // namespace

int main() {
  const char* dir = std::getenv("HVD_TEST_NCCL_DIR");
  const char* store = std::getenv("HVD_RENDEZVOUS");
  if (store == nullptr || std::string(store).rfind("hvd://", 0) != 0) {
    // The point is the launcher's store: a file store would make the test pass without it.
    std::fprintf(stderr,
                 "fake_nccl_worker: run me under hvdrun (HVD_RENDEZVOUS is %s, not hvd://)\n",
                 store == nullptr ? "unset" : store);
    return 2;
  }
  if (dir == nullptr || *dir == '\0') {
    std::fprintf(stderr,
                 "fake_nccl_worker: set HVD_TEST_NCCL_DIR to a directory every rank shares\n");
    return 2;
  }
  auto* gpu = new hvd::testing::HostGpuBackend(dir);  // lives as long as the process
  hvd::runtime::gpu::SetGpuBackendForTesting(gpu);
  const hvd::Status s = Run(gpu);
  if (!s.ok()) {
    std::fprintf(stderr, "fake_nccl_worker: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
