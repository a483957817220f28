// Device tensors through the public API on a real GPU (skipped, naming why, without one): one
// rank on NCCL end to end (fused and single allreduces, averages and scales, broadcast, the
// results the runtime owns), and two ranks sharing one GPU, which NCCL refuses, staged through
// host memory. Ranks are forked (testutil/multiproc.h): the parent never touches CUDA, whose
// state would not survive a fork; each child probes for itself.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "core/context.h"
#include "gpu/gpu_backend.h"
#include "runtime_env.h"
#include "testutil/multiproc.h"

namespace hvd {
namespace {

using testing::Check;
using testing::ExpectEqual;
using testing::InitRank;
using testing::RunRanks;

constexpr char kSkip[] = "SKIP: ";

// Unavailable("SKIP: <why>") when this process cannot use a GPU.
Status NeedGpu(int* devices) {
  setenv("HVD_CUDA_PLUGIN", HVD_CUDA_PLUGIN_PATH, 0);  // this tree's plugin (tests/CMakeLists.txt)
  runtime::gpu::GpuBackend* backend = nullptr;
  Status s = runtime::gpu::LoadGpuBackend(&backend);
  if (!s.ok()) return Unavailable(kSkip + s.message());
  *devices = backend->device_count();
  return Status::OK();
}

Status Cuda(cudaError_t e, const char* what) {
  return e == cudaSuccess ? Status::OK()
                          : Internal(std::string(what) + ": " + cudaGetErrorString(e));
}

// A device copy of `host`; freed by the process's exit (the ranks are forked children).
template <typename T>
Status ToDevice(const std::vector<T>& host, T** dev) {
  HVD_RETURN_IF_ERROR(Cuda(cudaMalloc(reinterpret_cast<void**>(dev),
                                      std::max<size_t>(1, host.size() * sizeof(T))),
                           "cudaMalloc"));
  HVD_RETURN_IF_ERROR(Cuda(
      cudaMemcpy(*dev, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice),
      "cudaMemcpy to device"));
  // A pageable copy may return before its DMA lands, and hvd's stream is not ordered after the
  // legacy stream: finish it before the runtime reads the memory.
  return Cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

template <typename T>
Status ToHost(const T* dev, size_t n, std::vector<T>* host) {
  host->resize(n);
  return Cuda(cudaMemcpy(host->data(), dev, n * sizeof(T), cudaMemcpyDeviceToHost),
              "cudaMemcpy to host");
}

Tensor OnGpu(void* data, DataType dtype, int64_t n, cudaStream_t stream = nullptr) {
  Tensor t;
  t.data = data;
  t.dtype = dtype;
  t.shape = {n};
  t.device = 0;
  t.stream = stream;
  return t;
}

// Skips the test when every rank said SKIP; otherwise expects every rank OK.
void ExpectOkOrSkip(const testing::RunResult& res) {
  bool skipped = !res.ranks.empty();
  std::string why;
  for (const auto& r : res.ranks) {
    skipped = skipped && r.reported && r.status.message().rfind(kSkip, 0) == 0;
    if (r.reported) why = r.status.message();
  }
  if (skipped) GTEST_SKIP() << why.substr(sizeof(kSkip) - 1);
  HVD_EXPECT_RANKS_OK(res);
}

// Allreduces, broadcast and allgather of device tensors; `want_nccl`: whether the batches must
// have run on NCCL (one rank per GPU) or staged (ranks sharing a GPU).
Status Collectives(int rank, int size, const std::string& dir, bool want_nccl) {
  int devices = 0;
  HVD_RETURN_IF_ERROR(NeedGpu(&devices));
  HVD_RETURN_IF_ERROR(Cuda(cudaSetDevice(0), "cudaSetDevice"));
  cudaStream_t stream;
  HVD_RETURN_IF_ERROR(Cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream"));
  HVD_RETURN_IF_ERROR(InitRank(rank, size, dir));

  // Odd sizes, written on the caller's stream right before the call: the runtime must wait for it.
  const int64_t n = 1000003;
  std::vector<float> x(n, static_cast<float>(rank + 1));
  float* dx = nullptr;
  HVD_RETURN_IF_ERROR(ToDevice(std::vector<float>(n, 0.0f), &dx));
  HVD_RETURN_IF_ERROR(Cuda(cudaMemcpyAsync(dx, x.data(), n * sizeof(float),
                                           cudaMemcpyHostToDevice, stream),
                           "async fill"));
  AllreduceOptions sum;
  sum.op = ReduceOp::kSum;
  HVD_RETURN_IF_ERROR(Allreduce("big", OnGpu(dx, DataType::kFloat32, n, stream),
                                OnGpu(dx, DataType::kFloat32, n, stream), sum));
  std::vector<float> got;
  HVD_RETURN_IF_ERROR(ToHost(dx, n, &got));
  const float total = size * (size + 1) / 2.0f;
  HVD_RETURN_IF_ERROR(ExpectEqual("sum", got, std::vector<float>(n, total)));

  // A fused group of many small tensors, averaged with pre- and postscale.
  std::vector<float*> bufs;
  std::vector<Tensor> ts;
  for (int i = 0; i < 161; ++i) {
    float* d = nullptr;
    HVD_RETURN_IF_ERROR(ToDevice(std::vector<float>(i + 1, static_cast<float>(rank + i)), &d));
    bufs.push_back(d);
    ts.push_back(OnGpu(d, DataType::kFloat32, i + 1, stream));
  }
  AllreduceOptions avg;
  avg.prescale = 2.0;
  avg.postscale = 0.5;
  HVD_RETURN_IF_ERROR(GroupedAllreduce("group", ts, ts, avg));
  for (int i = 0; i < 161; ++i) {
    HVD_RETURN_IF_ERROR(ToHost(bufs[i], i + 1, &got));
    const float want = (size - 1) / 2.0f + i;  // mean over ranks of rank + i
    HVD_RETURN_IF_ERROR(ExpectEqual("group " + std::to_string(i), got,
                                    std::vector<float>(i + 1, want)));
  }

  // Half precision, broadcast, and an allgather whose result is device memory of the runtime's on
  // NCCL (host memory when staged).
  std::vector<uint16_t> h(5, rank == 0 ? 0x3C00 : 0x4000);  // 1.0 / 2.0 in binary16
  uint16_t* dh = nullptr;
  HVD_RETURN_IF_ERROR(ToDevice(h, &dh));
  HVD_RETURN_IF_ERROR(Broadcast("half", OnGpu(dh, DataType::kFloat16, 5, stream), 0));
  std::vector<uint16_t> hb;
  HVD_RETURN_IF_ERROR(ToHost(dh, 5, &hb));
  HVD_RETURN_IF_ERROR(ExpectEqual("broadcast", hb, std::vector<uint16_t>(5, 0x3C00)));

  std::vector<int32_t> rows(rank + 1, rank);
  int32_t* dr = nullptr;
  HVD_RETURN_IF_ERROR(ToDevice(rows, &dr));
  Handle g = AllgatherAsync("gather", OnGpu(dr, DataType::kInt32, rank + 1, stream));
  HVD_RETURN_IF_ERROR(g.Wait());
  const size_t gathered = static_cast<size_t>(size * (size + 1) / 2);
  HVD_RETURN_IF_ERROR(Check(g.output_bytes() == sizeof(int32_t) * gathered,
                            "allgather size " + std::to_string(g.output_bytes())));
  HVD_RETURN_IF_ERROR(Check(g.output_device() == (want_nccl ? 0 : -1),
                            "allgather result on device " + std::to_string(g.output_device())));
  std::vector<int32_t> all(gathered);
  const int32_t* out = static_cast<const int32_t*>(g.output_data());
  if (want_nccl) {
    HVD_RETURN_IF_ERROR(ToHost(out, gathered, &all));
  } else {
    all.assign(out, out + gathered);
  }
  std::vector<int32_t> want_all;
  for (int r = 0; r < size; ++r) want_all.insert(want_all.end(), r + 1, r);
  HVD_RETURN_IF_ERROR(ExpectEqual("allgather", all, want_all));

  const runtime::core::EngineStats stats = runtime::core::CurrentEngineStats();
  if (want_nccl) {
    HVD_RETURN_IF_ERROR(Check(stats.gpu_nccl_batches >= 3,
                              "want the allreduces and broadcast on NCCL; nccl batches " +
                                  std::to_string(stats.gpu_nccl_batches) + ", staged " +
                                  std::to_string(stats.gpu_staged_batches)));
  } else {
    HVD_RETURN_IF_ERROR(Check(stats.gpu_nccl_batches == 0 && stats.gpu_staged_batches >= 4,
                              "want every batch staged (ranks share a GPU); nccl batches " +
                                  std::to_string(stats.gpu_nccl_batches) + ", staged " +
                                  std::to_string(stats.gpu_staged_batches)));
  }
  return Shutdown();
}

TEST(GpuCollectives, OneRankRunsOnNcclEndToEnd) {
  ExpectOkOrSkip(RunRanks(1, [](int rank, int size, const std::string& dir) {
    return Collectives(rank, size, dir, /*want_nccl=*/true);
  }));
}

TEST(GpuCollectives, TwoRanksSharingOneGpuAreStagedThroughHostMemory) {
  ExpectOkOrSkip(RunRanks(2, [](int rank, int size, const std::string& dir) {
    return Collectives(rank, size, dir, /*want_nccl=*/false);
  }));
}

}  // namespace
}  // namespace hvd
