// The NCCL path of GPU operations on a machine without a GPU: tensors on "CUDA device 0" of a
// backend whose device memory is host memory, whose NCCL is host_nccl.h's file exchange, and
// where every rank has a GPU of its own, so every process set agrees on NCCL and the device
// executor's NCCL code runs as on a GPU: fused packing with padding and scales, in-place and
// out-of-place single tensors, broadcast, and the collectives whose results are device memory of
// their own (allgather and reducescatter, even and uneven; alltoall), a joined rank's identity.
// The CUDA calls themselves are tested on a GPU (tests/gpu/).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/context.h"
#include "host_gpu_backend.h"
#include "runtime_env.h"
#include "testutil/multiproc.h"

namespace hvd {
namespace {

using testing::Check;
using testing::ExpectEqual;
using testing::HostGpuBackend;
using testing::InitRank;
using testing::OnDevice;
using testing::RunRanks;

Status InitWithNccl(int rank, int size, const std::string& dir, HostGpuBackend** out) {
  auto* backend = new HostGpuBackend(dir);  // lives as long as the rank's process
  runtime::gpu::SetGpuBackendForTesting(backend);
  *out = backend;
  return InitRank(rank, size, dir);
}

// Result i of `h` (device memory of its own: device 0) as a vector.
template <typename T>
Status DeviceResult(const Handle& h, size_t i, std::vector<T>* out) {
  if (h.output_device(i) != 0) {
    return Internal("result " + std::to_string(i) + " is on device " +
                    std::to_string(h.output_device(i)) + ", want 0 (NCCL makes device results)");
  }
  const T* p = static_cast<const T*>(h.output_data(i));
  out->assign(p, p + h.output_bytes(i) / sizeof(T));
  return Status::OK();
}

Status ExpectNcclOnly(uint64_t at_least) {
  const runtime::core::EngineStats stats = runtime::core::CurrentEngineStats();
  return Check(stats.gpu_nccl_batches >= at_least && stats.gpu_staged_batches == 0,
               "want " + std::to_string(at_least) + "+ NCCL batches and none staged, got " +
                   std::to_string(stats.gpu_nccl_batches) + " and " +
                   std::to_string(stats.gpu_staged_batches));
}

TEST(GpuNcclPath, AllreduceFusedSingleScaledAndAveraged) {
  auto res = RunRanks(3, [](int rank, int size, const std::string& dir) -> Status {
    HostGpuBackend* gpu = nullptr;
    HVD_RETURN_IF_ERROR(InitWithNccl(rank, size, dir, &gpu));
    AllreduceOptions sum;
    sum.op = ReduceOp::kSum;
    // In place, no scale: NCCL reads and writes the caller's buffer.
    std::vector<float> x(1001, static_cast<float>(rank + 1));
    Tensor t = OnDevice(x.data(), DataType::kFloat32, {1001});
    HVD_RETURN_IF_ERROR(Allreduce("sum", t, t, sum));
    HVD_RETURN_IF_ERROR(ExpectEqual("sum", x, std::vector<float>(1001, 6.0f)));

    // Out of place, averaged: NCCL reads the input, the output is scaled afterwards.
    std::vector<float> in(7, static_cast<float>(rank)), out(7, -1.0f);
    HVD_RETURN_IF_ERROR(Allreduce("avg", OnDevice(in.data(), DataType::kFloat32, {7}),
                                  OnDevice(out.data(), DataType::kFloat32, {7})));
    HVD_RETURN_IF_ERROR(ExpectEqual("average", out, std::vector<float>(7, 1.0f)));
    HVD_RETURN_IF_ERROR(ExpectEqual("input untouched", in, std::vector<float>(7, rank)));

    // A single tensor with a prescale: copied and scaled into the output first.
    std::vector<double> p(5, rank + 1.0), po(5, 0.0);
    AllreduceOptions pre = sum;
    pre.prescale = 2.0;
    pre.postscale = 0.25;
    HVD_RETURN_IF_ERROR(Allreduce("pre", OnDevice(p.data(), DataType::kFloat64, {5}),
                                  OnDevice(po.data(), DataType::kFloat64, {5}), pre));
    HVD_RETURN_IF_ERROR(ExpectEqual("prescaled", po, std::vector<double>(5, 3.0)));
    HVD_RETURN_IF_ERROR(ExpectEqual("prescaled input", p, std::vector<double>(5, rank + 1.0)));

    // A group fuses into the device fusion buffer: odd sizes (padded apart), an empty tensor.
    std::vector<std::vector<int32_t>> g = {std::vector<int32_t>(3, rank),
                                           {},
                                           std::vector<int32_t>(65, 2 * rank),
                                           std::vector<int32_t>(1, 7)};
    std::vector<Tensor> ts;
    for (auto& v : g) {
      ts.push_back(OnDevice(v.data(), DataType::kInt32, {static_cast<int64_t>(v.size())}));
    }
    HVD_RETURN_IF_ERROR(GroupedAllreduce("group", ts, ts, sum));
    HVD_RETURN_IF_ERROR(ExpectEqual("group 0", g[0], std::vector<int32_t>(3, 3)));
    HVD_RETURN_IF_ERROR(ExpectEqual("group 2", g[2], std::vector<int32_t>(65, 6)));
    HVD_RETURN_IF_ERROR(ExpectEqual("group 3", g[3], std::vector<int32_t>(1, 21)));
    HVD_RETURN_IF_ERROR(ExpectNcclOnly(4));

    // int16, which NCCL lacks, is staged through host memory in an NCCL set.
    std::vector<int16_t> i16(5, static_cast<int16_t>(rank - 1));
    Tensor ti = OnDevice(i16.data(), DataType::kInt16, {5});
    HVD_RETURN_IF_ERROR(Allreduce("i16", ti, ti, sum));
    HVD_RETURN_IF_ERROR(ExpectEqual("int16", i16, std::vector<int16_t>(5, 0)));
    const runtime::core::EngineStats stats = runtime::core::CurrentEngineStats();
    HVD_RETURN_IF_ERROR(Check(stats.gpu_staged_batches == 1, "want the int16 batch staged"));
    HVD_RETURN_IF_ERROR(Check(gpu->comms == 1, "want one communicator for the global set"));
    return Shutdown();
  });
  HVD_EXPECT_RANKS_OK(res);
}

TEST(GpuNcclPath, BroadcastAllgatherAlltoallReducescatterMakeDeviceResults) {
  auto res = RunRanks(3, [](int rank, int size, const std::string& dir) -> Status {
    HostGpuBackend* gpu = nullptr;
    HVD_RETURN_IF_ERROR(InitWithNccl(rank, size, dir, &gpu));
    std::vector<int32_t> b(9, rank == 2 ? 42 : rank);
    HVD_RETURN_IF_ERROR(Broadcast("b", OnDevice(b.data(), DataType::kInt32, {9}), 2));
    HVD_RETURN_IF_ERROR(ExpectEqual("broadcast", b, std::vector<int32_t>(9, 42)));
    {
      // Even blocks: NCCL's allgather. Uneven: grouped send/recv into each rank's place.
      std::vector<float> even(4, static_cast<float>(rank));
      std::vector<float> uneven(2 * (rank + 1), static_cast<float>(rank));
      Handle he = AllgatherAsync("even", OnDevice(even.data(), DataType::kFloat32, {2, 2}));
      Handle hu =
          AllgatherAsync("uneven", OnDevice(uneven.data(), DataType::kFloat32, {rank + 1, 2}));
      HVD_RETURN_IF_ERROR(he.Wait());
      HVD_RETURN_IF_ERROR(hu.Wait());
      std::vector<float> got;
      HVD_RETURN_IF_ERROR(DeviceResult(he, 0, &got));
      HVD_RETURN_IF_ERROR(ExpectEqual("even allgather", got,
                                      std::vector<float>{0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2}));
      HVD_RETURN_IF_ERROR(Check(he.output_shape() == std::vector<int64_t>{6, 2}, "even shape"));
      HVD_RETURN_IF_ERROR(DeviceResult(hu, 0, &got));
      HVD_RETURN_IF_ERROR(ExpectEqual("uneven allgather", got,
                                      std::vector<float>{0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2}));
      HVD_RETURN_IF_ERROR(
          Check(hu.output_splits() == std::vector<int64_t>{1, 2, 3}, "uneven splits"));

      // Rank r sends r+1 rows to rank 0 and one to each other rank.
      std::vector<int64_t> a(rank + 3);
      for (size_t i = 0; i < a.size(); ++i) a[i] = rank * 100 + static_cast<int64_t>(i);
      std::vector<int64_t> splits = {rank + 1, 1, 1};
      Handle at = AlltoallAsync(
          "a2a", OnDevice(a.data(), DataType::kInt64, {static_cast<int64_t>(a.size())}), splits);
      HVD_RETURN_IF_ERROR(at.Wait());
      std::vector<int64_t> recv;
      HVD_RETURN_IF_ERROR(DeviceResult(at, 0, &recv));
      const std::vector<int64_t> want = rank == 0 ? std::vector<int64_t>{0, 100, 101, 200, 201, 202}
                                        : rank == 1 ? std::vector<int64_t>{1, 102, 203}
                                                    : std::vector<int64_t>{2, 103, 204};
      HVD_RETURN_IF_ERROR(ExpectEqual("alltoall", recv, want));

      // Reducescatter: 6 rows share evenly (NCCL's), 4 unevenly (2, 1, 1: an allreduce and a
      // slice); averaged with a prescale. Element i of rank r is r + 1 + i, so each share's
      // offset shows: the average of 3 x (r + 1 + i) over the ranks is 6 + 3i.
      AllreduceOptions avg;
      avg.op = ReduceOp::kAverage;
      avg.prescale = 3.0;
      std::vector<float> rs6(12), rs4(8);
      for (size_t i = 0; i < rs6.size(); ++i) rs6[i] = static_cast<float>(rank + 1 + i);
      for (size_t i = 0; i < rs4.size(); ++i) rs4[i] = static_cast<float>(rank + 1 + i);
      const std::vector<float> rs4_in = rs4;
      Handle r6 = ReducescatterAsync("rs6", OnDevice(rs6.data(), DataType::kFloat32, {6, 2}), avg);
      Handle r4 = ReducescatterAsync("rs4", OnDevice(rs4.data(), DataType::kFloat32, {4, 2}), avg);
      HVD_RETURN_IF_ERROR(r6.Wait());
      HVD_RETURN_IF_ERROR(r4.Wait());
      auto share = [](size_t from, size_t n) {
        std::vector<float> v;
        for (size_t i = from; i < from + n; ++i) v.push_back(6.0f + 3.0f * static_cast<float>(i));
        return v;
      };
      HVD_RETURN_IF_ERROR(DeviceResult(r6, 0, &got));
      HVD_RETURN_IF_ERROR(ExpectEqual("even reducescatter", got, share(4 * rank, 4)));
      HVD_RETURN_IF_ERROR(DeviceResult(r4, 0, &got));
      HVD_RETURN_IF_ERROR(ExpectEqual("uneven reducescatter", got,
                                      rank == 0 ? share(0, 4) : share(2 + 2 * rank, 2)));
      HVD_RETURN_IF_ERROR(
          Check(r4.output_splits() == std::vector<int64_t>{2, 1, 1}, "uneven shares"));
      HVD_RETURN_IF_ERROR(ExpectEqual("reducescatter input", rs4, rs4_in));
      HVD_RETURN_IF_ERROR(ExpectNcclOnly(6));
    }
    // Every device result went back to its device with the operation's last reference (the
    // handles', or the engine's when it finishes after the waiter woke).
    HVD_RETURN_IF_ERROR(Shutdown());
    testing::HostDevice* d = gpu->device(0);
    return Check(d->allocated == 5 && d->freed == 5,
                 "device results: " + std::to_string(d->allocated.load()) + " allocated, " +
                     std::to_string(d->freed.load()) + " freed; want 5 and 5");
  });
  HVD_EXPECT_RANKS_OK(res);
}

TEST(GpuNcclPath, AJoinedRankContributesTheIdentityOnNccl) {
  auto res = RunRanks(2, [](int rank, int size, const std::string& dir) -> Status {
    HostGpuBackend* gpu = nullptr;
    HVD_RETURN_IF_ERROR(InitWithNccl(rank, size, dir, &gpu));
    AllreduceOptions sum;
    sum.op = ReduceOp::kSum;
    // Both ranks use the GPU first, so the set runs NCCL before rank 1 joins.
    std::vector<float> x(5, 1.0f);
    Tensor t = OnDevice(x.data(), DataType::kFloat32, {5});
    HVD_RETURN_IF_ERROR(Allreduce("first", t, t, sum));
    HVD_RETURN_IF_ERROR(ExpectEqual("first", x, std::vector<float>(5, 2.0f)));
    if (rank == 1) {
      int last = -1;
      HVD_RETURN_IF_ERROR(Join(&last));
      HVD_RETURN_IF_ERROR(ExpectNcclOnly(3));
      return Shutdown();
    }
    // Alone: a single tensor, a fused pair, an average (over the one contributor) and a
    // reducescatter, each with rank 1 sending the identity from its scratch buffers.
    std::vector<float> y(5, 3.0f);
    Tensor ty = OnDevice(y.data(), DataType::kFloat32, {5});
    HVD_RETURN_IF_ERROR(Allreduce("alone", ty, ty, sum));
    HVD_RETURN_IF_ERROR(ExpectEqual("sum with a joined rank", y, std::vector<float>(5, 3.0f)));
    std::vector<float> rs(4, 5.0f);
    AllreduceOptions avg;
    Handle h = ReducescatterAsync("rs", OnDevice(rs.data(), DataType::kFloat32, {2, 2}), avg);
    HVD_RETURN_IF_ERROR(h.Wait());
    std::vector<float> got;
    HVD_RETURN_IF_ERROR(DeviceResult(h, 0, &got));
    HVD_RETURN_IF_ERROR(
        ExpectEqual("reducescatter with a joined rank", got, std::vector<float>(2, 5.0f)));
    int last = -1;
    HVD_RETURN_IF_ERROR(Join(&last));
    HVD_RETURN_IF_ERROR(ExpectNcclOnly(3));
    return Shutdown();
  });
  HVD_EXPECT_RANKS_OK(res);
}

TEST(GpuNcclPath, AResultThatCannotBeAllocatedComesBackInHostMemory) {
  auto res = RunRanks(2, [](int rank, int size, const std::string& dir) -> Status {
    HostGpuBackend* gpu = nullptr;
    HVD_RETURN_IF_ERROR(InitWithNccl(rank, size, dir, &gpu));
    std::vector<float> warm(1, 1.0f);  // makes the device, so its allocations can fail
    Tensor tw = OnDevice(warm.data(), DataType::kFloat32, {1});
    HVD_RETURN_IF_ERROR(Allreduce("warm", tw, tw, testing::Sum()));
    gpu->device(0)->fail_allocations = rank == 1;
    std::vector<int32_t> rows(3 * (rank + 1));
    for (size_t i = 0; i < rows.size(); ++i) rows[i] = rank * 100 + static_cast<int32_t>(i);
    Handle h = AllgatherAsync("g", OnDevice(rows.data(), DataType::kInt32, {rank + 1, 3}));
    HVD_RETURN_IF_ERROR(h.Wait());
    HVD_RETURN_IF_ERROR(Check(h.output_device() == (rank == 1 ? -1 : 0),
                              "result on device " + std::to_string(h.output_device())));
    const int32_t* p = static_cast<const int32_t*>(h.output_data());
    const std::vector<int32_t> got(p, p + h.output_bytes() / sizeof(int32_t));
    HVD_RETURN_IF_ERROR(
        ExpectEqual("allgather", got, std::vector<int32_t>{0, 1, 2, 100, 101, 102, 103, 104, 105}));
    HVD_RETURN_IF_ERROR(ExpectNcclOnly(2));
    return Shutdown();
  });
  HVD_EXPECT_RANKS_OK(res);
}

// Four ranks on two simulated hosts with HVD_HIERARCHICAL_ALLREDUCE=1: every allreduce runs as an
// NCCL reducescatter within the host, the CPU ring across hosts and an NCCL allgather, with
// shares padded (sizes not divisible by the two local ranks); without the variable on every rank
// the allreduces stay flat. `set`: whether this rank sets it; `on`: whether the job runs it.
Status HierarchicalRank(int rank, int size, const std::string& dir, bool set, bool on) {
  setenv("HVD_HOSTNAME", testing::SplitHosts(size, 2)[rank].c_str(), 1);
  setenv("HVD_ADVERTISE_ADDR", "127.0.0.1", 1);
  if (set) setenv("HVD_HIERARCHICAL_ALLREDUCE", "1", 1);
  HostGpuBackend* gpu = nullptr;
  HVD_RETURN_IF_ERROR(InitWithNccl(rank, size, dir, &gpu));
  AllreduceOptions sum;
  sum.op = ReduceOp::kSum;
  // Element i of rank r is r + 1 + i: a share reduced at the wrong place shows.
  std::vector<float> x(1001), want(1001);
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = static_cast<float>(rank + 1 + i);
    want[i] = static_cast<float>(10 + 4 * i);
  }
  Tensor t = OnDevice(x.data(), DataType::kFloat32, {1001});
  HVD_RETURN_IF_ERROR(Allreduce("sum", t, t, sum));
  HVD_RETURN_IF_ERROR(ExpectEqual("sum", x, want));
  std::vector<std::vector<double>> g = {
      std::vector<double>(3, rank), {}, std::vector<double>(17, 2.0 * rank)};
  std::vector<Tensor> ts;
  for (auto& v : g) {
    ts.push_back(OnDevice(v.data(), DataType::kFloat64, {static_cast<int64_t>(v.size())}));
  }
  AllreduceOptions avg;  // average, prescaled
  avg.prescale = 2.0;
  HVD_RETURN_IF_ERROR(GroupedAllreduce("group", ts, ts, avg));
  HVD_RETURN_IF_ERROR(ExpectEqual("group 0", g[0], std::vector<double>(3, 3.0)));
  HVD_RETURN_IF_ERROR(ExpectEqual("group 2", g[2], std::vector<double>(17, 6.0)));
  std::vector<int64_t> one(1, rank);
  Tensor t1 = OnDevice(one.data(), DataType::kInt64, {1});
  HVD_RETURN_IF_ERROR(Allreduce("one", t1, t1, sum));
  HVD_RETURN_IF_ERROR(ExpectEqual("one element", one, std::vector<int64_t>(1, 6)));
  const runtime::core::EngineStats stats = runtime::core::CurrentEngineStats();
  HVD_RETURN_IF_ERROR(Check(stats.gpu_nccl_batches == 3, "want 3 NCCL batches"));
  HVD_RETURN_IF_ERROR(
      Check(gpu->comms == (on ? 2 : 1), "communicators: " + std::to_string(gpu->comms)));
  HVD_RETURN_IF_ERROR(
      Check(stats.gpu_hierarchical_batches == (on ? 3u : 0u),
            "hierarchical batches: " + std::to_string(stats.gpu_hierarchical_batches)));
  return Shutdown();
}

TEST(GpuNcclPath, HierarchicalAllreduceAcrossTwoHosts) {
  auto res = RunRanks(4, [](int rank, int size, const std::string& dir) -> Status {
    return HierarchicalRank(rank, size, dir, /*set=*/true, /*on=*/true);
  });
  HVD_EXPECT_RANKS_OK(res);
}

TEST(GpuNcclPath, HierarchicalOnlyWhenSetOnEveryRank) {
  auto res = RunRanks(4, [](int rank, int size, const std::string& dir) -> Status {
    unsetenv("HVD_HIERARCHICAL_ALLREDUCE");  // rank 3 leaves it at its default
    return HierarchicalRank(rank, size, dir, /*set=*/rank != 3, /*on=*/false);
  });
  HVD_EXPECT_RANKS_OK(res);
}

}  // namespace
}  // namespace hvd
