// GPU operations on a machine without a GPU: tensors on "CUDA device 0" of a backend whose device
// memory is host memory (host_gpu_backend.h) run through the runtime's real GPU batch path:
// negotiated as GPU operations, the set's mode agreed by every rank (staged: this backend has no
// NCCL), inputs copied to host buffers, the host collective run, outputs copied back.
#include <gtest/gtest.h>

#include <numeric>
#include <string>
#include <vector>

#include "core/context.h"
#include "host_gpu_backend.h"
#include "runtime_env.h"
#include "testutil/multiproc.h"

namespace hvd {
namespace {

using testing::Check;
using testing::Contains;
using testing::ExpectEqual;
using testing::HostGpuBackend;
using testing::InitRank;
using testing::OnDevice;
using testing::RunRanks;

// Installs the host backend (in the forked rank) and initializes hvd.
Status InitWithHostGpu(int rank, int size, const std::string& dir, HostGpuBackend** out) {
  auto* backend = new HostGpuBackend();  // lives as long as the rank's process
  runtime::gpu::SetGpuBackendForTesting(backend);
  *out = backend;
  return InitRank(rank, size, dir);
}

TEST(GpuStaged, AllreduceSumAverageGroupedAndInt16) {
  auto res = RunRanks(3, [](int rank, int size, const std::string& dir) -> Status {
    HostGpuBackend* gpu = nullptr;
    HVD_RETURN_IF_ERROR(InitWithHostGpu(rank, size, dir, &gpu));
    std::vector<float> x(1001, static_cast<float>(rank + 1));
    AllreduceOptions sum;
    sum.op = ReduceOp::kSum;
    Tensor t = OnDevice(x.data(), DataType::kFloat32, {1001});
    HVD_RETURN_IF_ERROR(Allreduce("sum", t, t, sum));
    HVD_RETURN_IF_ERROR(ExpectEqual("sum", x, std::vector<float>(1001, 6.0f)));

    std::vector<float> in(7, static_cast<float>(rank)), out(7, -1.0f);
    HVD_RETURN_IF_ERROR(Allreduce("avg", OnDevice(in.data(), DataType::kFloat32, {7}),
                                  OnDevice(out.data(), DataType::kFloat32, {7})));
    HVD_RETURN_IF_ERROR(ExpectEqual("average", out, std::vector<float>(7, 1.0f)));
    HVD_RETURN_IF_ERROR(ExpectEqual("input untouched", in, std::vector<float>(7, rank)));

    // A group fuses: odd sizes, an empty tensor.
    std::vector<std::vector<double>> g = {
        std::vector<double>(3, rank), {}, std::vector<double>(65, 2.0 * rank)};
    std::vector<Tensor> ts;
    for (auto& v : g) {
      ts.push_back(OnDevice(v.data(), DataType::kFloat64, {static_cast<int64_t>(v.size())}));
    }
    AllreduceOptions scaled = sum;
    scaled.prescale = 0.5;
    HVD_RETURN_IF_ERROR(GroupedAllreduce("group", ts, ts, scaled));
    HVD_RETURN_IF_ERROR(ExpectEqual("group 0", g[0], std::vector<double>(3, 1.5)));
    HVD_RETURN_IF_ERROR(ExpectEqual("group 2", g[2], std::vector<double>(65, 3.0)));

    // A group of two dtypes runs as two batches: each stages its own tensors only (an output of
    // the other batch must keep what that batch wrote).
    std::vector<float> fin(3, 1.0f), fout(3, -1.0f);
    std::vector<double> din(4, 2.0), dout(4, -1.0);
    std::vector<Tensor> mixed_in = {OnDevice(fin.data(), DataType::kFloat32, {3}),
                                    OnDevice(din.data(), DataType::kFloat64, {4})};
    std::vector<Tensor> mixed_out = {OnDevice(fout.data(), DataType::kFloat32, {3}),
                                     OnDevice(dout.data(), DataType::kFloat64, {4})};
    HVD_RETURN_IF_ERROR(GroupedAllreduce("mixed", mixed_in, mixed_out, sum));
    HVD_RETURN_IF_ERROR(ExpectEqual("mixed float32", fout, std::vector<float>(3, 3.0f)));
    HVD_RETURN_IF_ERROR(ExpectEqual("mixed float64", dout, std::vector<double>(4, 6.0)));

    std::vector<int16_t> i16(5, static_cast<int16_t>(rank - 1));
    Tensor ti = OnDevice(i16.data(), DataType::kInt16, {5});
    HVD_RETURN_IF_ERROR(Allreduce("i16", ti, ti, sum));
    HVD_RETURN_IF_ERROR(ExpectEqual("int16", i16, std::vector<int16_t>(5, 0)));

    // The batches went through the device: the caller's stream was waited on, copies made.
    testing::HostDevice* d = gpu->device(0);
    HVD_RETURN_IF_ERROR(Check(d != nullptr && d->waited > 0 && d->copies >= 8 && d->syncs > 0,
                              "the GPU path did not run"));
    const runtime::core::EngineStats stats = runtime::core::CurrentEngineStats();
    HVD_RETURN_IF_ERROR(Check(stats.gpu_staged_batches >= 4 && stats.gpu_nccl_batches == 0,
                              "want 4+ staged GPU batches and none on NCCL, got " +
                                  std::to_string(stats.gpu_staged_batches) + " and " +
                                  std::to_string(stats.gpu_nccl_batches)));
    HVD_RETURN_IF_ERROR(Shutdown());
    // Each operation's ready event, recorded at submission, was waited on exactly once (one per
    // operation here: every tensor of one is on one stream), and none is left over.
    return Check(d->recorded == 5 && d->waited == 5 && d->released == 0,
                 "ready events: " + std::to_string(d->recorded.load()) + " recorded, " +
                     std::to_string(d->waited.load()) + " waited, " +
                     std::to_string(d->released.load()) + " released; want 5, 5, 0");
  });
  HVD_EXPECT_RANKS_OK(res);
}

TEST(GpuStaged, BroadcastAllgatherAlltoallReducescatter) {
  auto res = RunRanks(2, [](int rank, int size, const std::string& dir) -> Status {
    HostGpuBackend* gpu = nullptr;
    HVD_RETURN_IF_ERROR(InitWithHostGpu(rank, size, dir, &gpu));
    std::vector<int32_t> b(9, rank == 1 ? 42 : 0);
    HVD_RETURN_IF_ERROR(Broadcast("b", OnDevice(b.data(), DataType::kInt32, {9}), 1));
    HVD_RETURN_IF_ERROR(ExpectEqual("broadcast", b, std::vector<int32_t>(9, 42)));

    // Uneven first dimensions; the result is in host memory (docs/gpu.md).
    std::vector<float> rows(2 * (rank + 1), static_cast<float>(rank));
    Handle h = AllgatherAsync("g", OnDevice(rows.data(), DataType::kFloat32, {rank + 1, 2}));
    HVD_RETURN_IF_ERROR(h.Wait());
    HVD_RETURN_IF_ERROR(Check(h.output_device() == -1, "a staged result is in host memory"));
    const float* got = static_cast<const float*>(h.output_data());
    std::vector<float> all(got, got + h.output_bytes() / sizeof(float));
    HVD_RETURN_IF_ERROR(ExpectEqual("allgather", all, std::vector<float>{0, 0, 1, 1, 1, 1}));

    std::vector<int64_t> a = {rank * 10, rank * 10 + 1, rank * 10 + 2};
    std::vector<int64_t> splits = {1, 2};
    Handle at = AlltoallAsync("a2a", OnDevice(a.data(), DataType::kInt64, {3}), splits);
    HVD_RETURN_IF_ERROR(at.Wait());
    const int64_t* r = static_cast<const int64_t*>(at.output_data());
    std::vector<int64_t> recv(r, r + at.output_bytes() / sizeof(int64_t));
    HVD_RETURN_IF_ERROR(
        ExpectEqual("alltoall", recv,
                    rank == 0 ? std::vector<int64_t>{0, 10} : std::vector<int64_t>{1, 2, 11, 12}));

    std::vector<float> rs(4, static_cast<float>(rank + 1));
    AllreduceOptions o;
    o.op = ReduceOp::kSum;
    Handle hr = ReducescatterAsync("rs", OnDevice(rs.data(), DataType::kFloat32, {4}), o);
    HVD_RETURN_IF_ERROR(hr.Wait());
    const float* s = static_cast<const float*>(hr.output_data());
    std::vector<float> share(s, s + hr.output_bytes() / sizeof(float));
    HVD_RETURN_IF_ERROR(ExpectEqual("reducescatter", share, std::vector<float>(2, 3.0f)));
    return Shutdown();
  });
  HVD_EXPECT_RANKS_OK(res);
}

TEST(GpuStaged, HostOnOneRankAndGpuOnAnotherIsAMismatchNamingBoth) {
  auto res = RunRanks(2, [](int rank, int size, const std::string& dir) -> Status {
    HostGpuBackend* gpu = nullptr;
    HVD_RETURN_IF_ERROR(InitWithHostGpu(rank, size, dir, &gpu));
    std::vector<float> x(4, 1.0f);
    Tensor t = OnDevice(x.data(), DataType::kFloat32, {4}, rank == 0 ? 0 : -1);
    Status s = Allreduce("mixed", t, t);
    HVD_RETURN_IF_ERROR(Check(!s.ok() && Contains(s.message(), "on a GPU") &&
                                  Contains(s.message(), "same kind of memory"),
                              "want a mismatch naming the GPU rank: " + s.ToString()));
    // Inputs and outputs on different devices are refused before anything is submitted.
    std::vector<float> y(4);
    Status d = Allreduce("split", OnDevice(x.data(), DataType::kFloat32, {4}, 0),
                         OnDevice(y.data(), DataType::kFloat32, {4}, 1));
    HVD_RETURN_IF_ERROR(Check(
        d.code() == StatusCode::kInvalidArgument && Contains(d.message(), "must be on one device"),
        d.ToString()));
    Status far = Allreduce("far", OnDevice(x.data(), DataType::kFloat32, {4}, 7),
                           OnDevice(x.data(), DataType::kFloat32, {4}, 7));
    HVD_RETURN_IF_ERROR(Check(
        far.code() == StatusCode::kInvalidArgument && Contains(far.message(), "sees 2 device(s)"),
        far.ToString()));
    HVD_RETURN_IF_ERROR(Shutdown());
    if (rank != 0) return Status::OK();
    // The failed operation's event, recorded at submission, went back to the pool unwaited.
    testing::HostDevice* dev = gpu->device(0);
    return Check(dev != nullptr && dev->recorded == 1 && dev->waited == 0 && dev->released == 1,
                 "want the failed operation's ready event released");
  });
  HVD_EXPECT_RANKS_OK(res);
}

TEST(GpuStaged, AJoinedRankContributesNothingToAGpuAllreduce) {
  auto res = RunRanks(2, [](int rank, int size, const std::string& dir) -> Status {
    HostGpuBackend* gpu = nullptr;
    HVD_RETURN_IF_ERROR(InitWithHostGpu(rank, size, dir, &gpu));
    if (rank == 1) {
      int last = -1;
      HVD_RETURN_IF_ERROR(Join(&last));
      return Shutdown();
    }
    std::vector<float> x(5, 3.0f);
    Tensor t = OnDevice(x.data(), DataType::kFloat32, {5});
    AllreduceOptions sum;
    sum.op = ReduceOp::kSum;
    HVD_RETURN_IF_ERROR(Allreduce("alone", t, t, sum));
    HVD_RETURN_IF_ERROR(ExpectEqual("sum with a joined rank", x, std::vector<float>(5, 3.0f)));
    int last = -1;
    HVD_RETURN_IF_ERROR(Join(&last));
    return Shutdown();
  });
  HVD_EXPECT_RANKS_OK(res);
}

}  // namespace
}  // namespace hvd
